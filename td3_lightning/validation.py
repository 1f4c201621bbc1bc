"""The run's one validation pass: what the built model, datamodule and Trainer are asked to do, checked before any
process is started or anything is written.

The command line runs :func:`validate_run` once, when the Trainer is built (before it writes a log folder or starts
a process); a Python user's ``trainer.fit/validate/test`` runs it from the datamodule's ``setup``
(:func:`validate_once`). Each check below is called here and nowhere else. What needs no env (an option's range, the
rules between options) is checked by the classes' constructors and, on the command line, before anything is built
(``cli.check_options``).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import lightning as L
import torch
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from lightning.pytorch.utilities import rank_zero_warn

from td3_lightning.declarations import signature_defaults
from td3_lightning.batch_renorm import check_batch as check_batch_renorm_batch
from td3_lightning.batch_renorm import check_processes as check_batch_renorm_processes
from td3_lightning.checkpointing import choosing_episodes_tested
from td3_lightning.distributed import check_same_processes
from td3_lightning.envs import env_overrides, make_env, trained_on, training_aid_names
from td3_lightning.errors import UserInputError
from td3_lightning.extensions import check_extensions_act
from td3_lightning.extensions.policy_checkpoints import check_policy_checkpoint_options
from td3_lightning.extensions.teacher import check_teacher
from td3_lightning.resources import (
    available_cores,
    available_memory,
    bfloat16_emulated_warning,
    check_replay_memory,
    native_bfloat16,
    warn_if_cores_short,
    warn_if_disk_short,
)
from td3_lightning.rules import idle_options
from td3_lightning.schedules import check_schedule_length
from td3_lightning.user_input import shown

#: the stages (fit, validate, test) of each Trainer that have passed :func:`validate_run`
_validated: weakref.WeakKeyDictionary[L.Trainer, set[str]] = weakref.WeakKeyDictionary()


def validate_run(trainer: L.Trainer, model: L.LightningModule, data: Any, stage: str,
                 checkpoint: dict[str, Any] | None = None, new_run: bool = False) -> tuple[str, ...]:
    """Check the run ``trainer`` is about to do (``stage``: fit, validate or test) with ``model`` and ``data``,
    against ``checkpoint`` (the facts of the checkpoint it starts from, if any; ``new_run``: known to start from
    none): one-line :class:`UserInputError` for what cannot run; returns the warnings to say once every check has
    passed."""
    warnings: tuple[str, ...] = ()
    fit = stage == "fit"
    if checkpoint is not None:
        warnings += _checkpoint_against_run(checkpoint, trainer, data, stage)
    if fit:
        check_policy_checkpoint_options(model.hparams, {"num_envs": data.num_envs}, trainer.world_size,
                                        resumed=checkpoint is not None)
        check_batch_renorm_processes(model.hparams, trainer.world_size, resumed=checkpoint is not None)
        check_batch_renorm_batch(model.hparams, data.batch_size)
        check_schedule_length(model.hparams, trainer.max_steps)
        _replay_resources(trainer, data)
        warnings += data.check_n_step()
        if isinstance(trainer.accelerator, CPUAccelerator):
            warnings += bfloat16_emulated_warning(trainer.precision, native_bfloat16())
        if model.hparams.get("teacher"):  # read when fitting starts
            check_teacher(model.hparams.teacher, model.hparams)
        if new_run:  # no option that does nothing (a checkpoint that has one resumes as it was trained)
            warnings += _new_run_options(model, data) + _never_validated(trainer)
    if not fit or trainer.limit_val_batches != 0:  # fit may leave validation out
        warnings += data.check_episodes("test" if stage == "test" else "val", trainer.world_size)
    _validated.setdefault(trainer, set()).add(stage)
    return warnings


def validate_once(trainer: L.Trainer | None, stage: str) -> None:
    """:func:`validate_run` of a stage the command line has not validated (a Python user's ``trainer.fit``,
    ``validate`` or ``test``), its warnings said. The Trainer names its checkpoint only when it restores it, so the
    pass runs without the checkpoint's facts: the processes that saved it are checked at the restore
    (``distributed.unpack_rank_state``), its shapes by the module's ``load_state_dict``, and a new run's idle
    options are not looked for."""
    if trainer is None or stage in _validated.get(trainer, ()):  # None: setup called by hand, outside a Trainer
        return
    for warning in validate_run(trainer, trainer.lightning_module, trainer.datamodule, stage):
        rank_zero_warn(warning)


def _checkpoint_against_run(facts: dict[str, Any], trainer: L.Trainer, data: Any,
                            stage: str) -> tuple[str, ...]:
    """The checkpoint's observation and action spaces, privileged critic, processes and replay capacity against this
    run's (refused); the training options and env kwargs a resume changes (warned of)."""
    spec, env_id, path = data.spec, data.env_id, facts["path"]
    check_checkpoint_spaces(facts, env_id, data.env_kwargs, data.critic_obs_shape is not None, {
        "observation shape": tuple(spec.obs_shape),
        "action shape": (len(spec.action_low),),
        "privileged observation shape": data.critic_obs_shape,
    })
    bounds = facts["action_bounds"]
    if bounds is not None and [list(b) for b in bounds] != [list(spec.action_low), list(spec.action_high)]:
        raise UserInputError(
            f"checkpoint action bounds low={bounds[0]} high={bounds[1]} != {env_id}'s low={list(spec.action_low)} "
            f"high={list(spec.action_high)} ({path}); use the env the checkpoint was trained on"
        )
    warnings: tuple[str, ...] = ()
    fit = stage == "fit"
    if fit:
        if not facts["resumable"]:
            raise UserInputError(f"checkpoint {path} holds no optimizer or loop state (a slim or weights-only "
                                 "checkpoint): test and validate take it; fit resumes from its run's last.ckpt "
                                 "(--ckpt_path last), or trains a new run")
        if facts["processes"] is not None:
            check_same_processes(facts["processes"], trainer.world_size)
        capacity = facts["replay_capacity"]  # before the layout's check: the option to set, said the CLI's way
        if capacity is not None and capacity != data.buffer_size:
            raise UserInputError(f"checkpoint replay buffer capacity {capacity} != data.buffer_size "
                                 f"{data.buffer_size} ({path}); set data.buffer_size {capacity} to resume it")
        if facts["replay_layout"] is not None:
            try:
                data.check_replay_layout(facts["replay_layout"])
            except ValueError as error:
                raise UserInputError(f"cannot resume {path}: {error}") from None
        if changed := data.changed_training_options(facts["data_options"], path, facts["replay_size"]):
            warnings += (changed,)
    if stage == "test" and (seeds := choosing_episodes_tested(data.test_seed, data.test_episodes, facts["chosen_on"])):
        warnings += (seeds,)
    trained_id, trained_kwargs = facts["env"]
    if trained_id == env_id and trained_kwargs is not None:  # the same shapes, perhaps not the same env
        # played, a policy keeps the env's rules: its training aids are not asked for
        aids = () if fit else training_aid_names(env_id)
        overrides = env_overrides(trained_kwargs, env_id, data.env_kwargs, ignore=aids)
        if overrides:
            purpose = "to go on with its env" if fit else "to play it as it was trained"
            warnings += (f"checkpoint {path} was trained on {env_id} with other data.env_kwargs than this "
                         f"{stage}'s: add {' '.join(overrides)} {purpose}",)
    return warnings


def check_checkpoint_spaces(facts: dict[str, Any], env_id: str, env_kwargs: dict[str, Any] | None,
                            privileged_critic: bool, shapes: dict[str, tuple[int, ...] | None]) -> None:
    """The checkpoint's shapes (``shapes``: what -> this run's, e.g. ``observation shape``) and whether its critics read
    a privileged state, against this run's env ``env_id``."""
    keys = {"observation shape": "obs_shape", "action shape": "action_shape",
            "privileged observation shape": "critic_obs_shape"}
    for what, ours in shapes.items():
        theirs = facts[keys[what]]
        if theirs is not None and ours is not None and tuple(theirs) != tuple(ours):
            raise UserInputError(
                f"checkpoint {what} {tuple(theirs)} != {env_id}'s {tuple(ours)} ({facts['path']}); "
                "use the env (data.env_id, data.env_kwargs) the checkpoint was trained on"
                + trained_on(facts["env"], env_id, env_kwargs, facts["model"])
            )
    privileged = facts.get("privileged")
    if privileged is not None and privileged != privileged_critic:
        raise UserInputError(
            f"checkpoint {facts['path']} was trained with data.privileged_critic {str(privileged).lower()} (its "
            f"critics read {'a privileged state' if privileged else 'the observation'}); set "
            f"data.privileged_critic {str(privileged).lower()}"
        )


def checkpoint_of_another_env(facts: dict[str, Any] | None, data: dict[str, Any]) -> None:
    """The checkpoint's observation shape and privileged critic against the configured env's (``data``: the data
    options), when the model could not be built from the checkpoint's hyperparameters (e.g. the pixel driver with
    the state env's config): that is what to say, not what follows from it."""
    if facts is None or facts.get("obs_shape") is None:
        return
    env_kwargs = dict(data.get("env_kwargs") or {})
    try:
        probe = make_env(data.get("env_id"), env_kwargs)
    except Exception:  # noqa: BLE001 - the env's own error is reported by the datamodule
        return
    shape = tuple(probe.observation_space.shape or ())
    probe.close()
    check_checkpoint_spaces(facts, data.get("env_id"), env_kwargs, bool(data.get("privileged_critic")),
                            {"observation shape": shape})


def _never_validated(trainer: L.Trainer) -> tuple[str, ...]:
    """A new fit shorter than its validation interval (warned of: no best checkpoint, no evaluation curve)."""
    interval, max_steps = trainer.val_check_interval, trainer.max_steps
    if trainer.limit_val_batches == 0 or not isinstance(interval, int) or not 0 < max_steps < interval:
        return ()
    return (f"trainer.val_check_interval {interval} is above trainer.max_steps {max_steps}: this fit never validates, "
            "so it keeps no best checkpoint (what test and export take by default); lower the interval",)


def _new_run_options(model: L.LightningModule, data: Any) -> tuple[str, ...]:
    """A new run's options that would do nothing on the env's observations (refused), or given the others (warned
    of)."""
    check_extensions_act(model.hparams)
    options = {"sampler": data.sampler, "priority_alpha": data.priority_alpha}
    defaults = {"model": signature_defaults(type(model)), "data": signature_defaults(type(data))}
    idle = idle_options(model.hparams, options, defaults)
    if not idle:
        return ()
    names = [entry.split(" ", 1)[0] for entry in idle]  # group.option
    back = " ".join(f"--{name} {shown(defaults[name.split('.')[0]][name.split('.')[1]])}" for name in names)
    them = "them" if len(idle) > 1 else "it"
    return (f"{', '.join(idle)}: set but idle in this run; leave {them} out, or where a config sets {them} give "
            f"{back}",)



def _replay_resources(trainer: L.Trainer, data: Any) -> None:
    """The replay buffer fits in the memory of its device (refused otherwise; each process on this node has one),
    the disk holds the checkpoints that carry it (warned of), and the cores the processes (warned of)."""
    per_node, cuda = trainer.num_devices, isinstance(trainer.accelerator, CUDAAccelerator)
    needed = data.replay_bytes()
    on_gpu = data.buffer_device.startswith("cuda") or (data.buffer_device == "auto" and cuda)
    if on_gpu and per_node == 1 and torch.cuda.is_available():  # one process: no fork that CUDA would break
        device = torch.device(data.buffer_device if data.buffer_device.startswith("cuda") else "cuda")
        check_replay_memory(needed, data.buffer_size, torch.cuda.mem_get_info(device)[0], "GPU memory")
    elif not on_gpu:
        check_replay_memory(needed, data.buffer_size, available_memory(), processes=per_node)
        warn_if_cores_short(per_node, available_cores())
    checkpoint = trainer.checkpoint_callback
    if not data.save_replay or checkpoint is None:
        return
    filled = data.transitions_after(trainer.max_steps)
    if checkpoint.save_last:
        where, copies = "last.ckpt holds", 2  # and its replacement, written beside it
    else:
        where, copies = "each kept checkpoint holds", max(int(checkpoint.save_top_k or 1), 1) + 1
    folder = checkpoint.dirpath or trainer.default_root_dir or os.getcwd()
    warn_if_disk_short(folder, copies * needed * filled // data.buffer_size,
                       f"{where} {filled} transitions of the replay buffer")
