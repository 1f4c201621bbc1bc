"""CarRacing with a compact state vector instead of pixels: ``CarRacingState-v0``.

gymnasium's ``CarRacing`` draws a 96x96 image with pygame on every ``step``; that
drawing costs far more than the Box2D physics.  :class:`CarRacingState` runs the
very same physics, track generation, tile contacts and reward book-keeping, but
never draws on ``step``: it returns a float32 feature vector computed from the
simulator state.  ``render()`` (``render_mode="rgb_array"`` or ``"human"``) still
draws the usual CarRacing view, e.g. for videos.

Reward, ``terminated`` and ``truncated`` are CarRacing-v3's, frame for frame:
-0.1 per physics frame, +1000/N for each newly visited tile (N tiles), a step
reward of -100 and ``terminated`` when the car leaves the playfield,
``terminated`` when the lap is complete, and ``truncated`` after 1000 physics
frames (the env counts the frames itself, see :class:`CarRacingState`).  The
summed reward is therefore the standard CarRacing score.  The only exceptions
are the training aids ``max_off_road_frames`` / ``off_road_penalty`` / ``off_road_open_lap``,
``missed_tile_penalty`` / ``missed_tile_penalty_ramp``, ``max_stall_frames``, ``max_rest_frames``,
``charge_time_left``, ``frame_penalty`` and ``recovery_starts``, all off by default.  ``aid_features`` (off by default)
appends two observation entries that tell the agent how close the stall aid's end is and whether a
tile was passed unvisited (``AID_FEATURE_NAMES``).

Conventions
-----------
Everything is expressed in the car frame: ``x`` points to the car's right,
``y`` points forward (the direction the hull's nose points).  Signs are chosen
so that "right" is positive everywhere, matching the action (steer +1 = right).
Track geometry uses the centre line: the ``N`` track points ``P_i`` with
tangent angle ``beta_i``; the road is ``2 * TRACK_WIDTH`` wide (TRACK_WIDTH =
6.67 world units; a tile is 3.5 units long).  Top speed of the car is about
100 units/s (Box2D's per-step translation cap), so speeds are divided by 100.

Features (index: name -- meaning -- documented range).  Every value is clipped
into its documented range, so observations always lie in ``observation_space``,
and a non-finite value (never seen, but the physics is not ours) becomes 0.

 idx    name                meaning                                          range
 0      v_forward           hull velocity along the car's nose / 100         [-1.5, 1.5]
 1      v_right             hull velocity to the car's right / 100           [-1.5, 1.5]
 2      yaw_rate            turning rate / 5 rad/s, + = turning right        [-3, 3]
 3      steer_angle         front-wheel angle / 0.4 rad (the joint limit,    [-1.25, 1.25]
                            Box2D lets it overshoot a little), + = right
 4      gas_level           current rear-wheel throttle (CarRacing ramps     [0, 1]
                            gas up by at most 0.1 per frame: it lags the
                            action)
 5-8    wheel_speed_fl/fr/rl/rr
                            wheel rim speed (omega * radius) / 100 of the    [-2, 2]
                            front-left, front-right, rear-left, rear-right
                            wheel; minus v_forward it is the wheel's spin
                            (> 0) or lock (< 0)
 9-12   grass_fl/fr/rl/rr   1 if that wheel touches no road tile (grass      {0, 1}
                            grip is 60% of road grip), else 0
 13     lateral_offset      signed distance of the hull centre from the      [-5, 5]
                            track centre line / TRACK_WIDTH: +-1 is the
                            road edge, + = right of the centre line;
                            saturates 33 units from the centre
 14     heading_sin         sin of the angle from the track direction to     [-1, 1]
                            the car's nose, + = nose right of the track
 15     heading_cos         cos of that angle (-1 = driving backwards)       [-1, 1]
 16-39  ahead_K_x,          for the 12 look-ahead distances K in             [-4, 4]
        ahead_K_y           LOOKAHEAD_TILES = 1, 2, 3, 5, 7, 10, 14, 19,
                            25, 32, 40, 50 tiles (3.5 to 175 units along
                            the centre line from the car's projection on
                            it): that centre-line point in the car frame
                            (x right, y forward) divided by (K * 3.5 +
                            TRACK_WIDTH).  On the road each pair is about
                            a unit bearing vector; together they give the
                            curvature coming up (175 units is ~1.8 s at
                            top speed, more than the braking distance).
                            Near points saturate when the car is far off.
 40     track_progress      the car's position along the lap: fraction of    [0, 1]
                            the track from the start tile
 41     tiles_visited       fraction of the N tiles visited so far           [0, 1]
 42     off_road_time       consecutive frames with all four wheels off the  [0, 1]
                            road / 100, saturating at 1 (with
                            max_off_road_frames it tells the agent how
                            close the off-road termination is)
 43     stall_time          only with aid_features: consecutive frames on    [0, 1]
                            the road without a newly visited tile / 100,
                            saturating at 1 (the count of max_stall_frames)
 44     tile_missed         only with aid_features: 1 once a tile was        {0, 1}
                            passed unvisited (info["tiles_missed"] > 0;
                            missed_tile_penalty is charged then), else 0

The projection onto the centre line is tracked from step to step (a local
search around the previous track point, falling back to the nearest point of
the whole track when the car is more than 2 * TRACK_WIDTH away from the local
candidates), and positions and tangents are interpolated between track points,
so the features change smoothly as the car moves.  There are no ray-cast
distances to the road edge: the road is a ribbon of constant width around the
centre line, so the lateral offset and the look-ahead points already fix where
the edges are, and ray casting in Python would cost more than the physics.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.box2d.car_dynamics import Car
from gymnasium.envs.box2d.car_racing import (
    FPS,
    PLAYFIELD,
    TRACK_DETAIL_STEP,
    TRACK_WIDTH,
    CarRacing,
    FrictionDetector,
)
from gymnasium.utils import EzPickle, seeding


ENV_ID = "CarRacingState-v0"

#: physics frames after which CarRacing-v3's TimeLimit truncates an episode
CAR_RACING_MAX_FRAMES = 1000

#: tiles the car's centre-line projection must be past an unvisited tile before it counts as missed
MISSED_TILE_MARGIN = 2

#: hull speed (world units per second, about 1% of top speed) under which the car counts as at rest
#: (``max_rest_frames``, ``gas_at_rest``)
REST_SPEED = 1.0

#: look-ahead distances along the centre line, in tiles (one tile = TRACK_DETAIL_STEP units)
LOOKAHEAD_TILES = (1, 2, 3, 5, 7, 10, 14, 19, 25, 32, 40, 50)

_SPEED_SCALE = 100.0
_YAW_SCALE = 5.0
_STEER_LIMIT = 0.4  # revolute joint limit of the front wheels (rad)
_COUNT_SCALE = 100.0  # off_road_time and stall_time: frames / 100
_DT = 1.0 / FPS

_WHEELS = ("fl", "fr", "rl", "rr")


def _feature_table() -> list[tuple[str, float, float]]:
    table = [
        ("v_forward", -1.5, 1.5),
        ("v_right", -1.5, 1.5),
        ("yaw_rate", -3.0, 3.0),
        ("steer_angle", -1.25, 1.25),
        ("gas_level", 0.0, 1.0),
    ]
    table += [(f"wheel_speed_{w}", -2.0, 2.0) for w in _WHEELS]
    table += [(f"grass_{w}", 0.0, 1.0) for w in _WHEELS]
    table += [("lateral_offset", -5.0, 5.0), ("heading_sin", -1.0, 1.0), ("heading_cos", -1.0, 1.0)]
    for k in LOOKAHEAD_TILES:
        table += [(f"ahead_{k}_x", -4.0, 4.0), (f"ahead_{k}_y", -4.0, 4.0)]
    table += [("track_progress", 0.0, 1.0), ("tiles_visited", 0.0, 1.0), ("off_road_time", 0.0, 1.0)]
    return table


_TABLE = _feature_table()
#: names of the observation entries, in order
FEATURE_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _TABLE)
#: documented lower / upper bound of each observation entry
FEATURE_LOW = np.array([lo for _, lo, _ in _TABLE], dtype=np.float32)
FEATURE_HIGH = np.array([hi for _, _, hi in _TABLE], dtype=np.float32)
N_FEATURES = len(_TABLE)
#: the entries ``aid_features=True`` appends, with their bounds
AID_FEATURE_NAMES: tuple[str, ...] = ("stall_time", "tile_missed")
_AID_LOW = np.zeros(len(AID_FEATURE_NAMES), dtype=np.float32)
_AID_HIGH = np.ones(len(AID_FEATURE_NAMES), dtype=np.float32)

_AHEAD_START = FEATURE_NAMES.index(f"ahead_{LOOKAHEAD_TILES[0]}_x")
_AHEAD_STOP = _AHEAD_START + 2 * len(LOOKAHEAD_TILES)
_AHEAD_OFFSETS = np.array(LOOKAHEAD_TILES, dtype=np.float64)
_AHEAD_INV_SCALE = 1.0 / (_AHEAD_OFFSETS * TRACK_DETAIL_STEP + TRACK_WIDTH)
# when the car is further than this from the tracked centre-line point, search the whole track
_RELOCATE_DIST2 = (2.0 * TRACK_WIDTH) ** 2


ACTION_MODES = ("carracing", "steer_throttle")


class CarRacingState(CarRacing):
    """CarRacing (continuous actions) observed through a float32 feature vector.

    Actions (``action_mode="carracing"``, the default) are CarRacing's:
    ``[steer in -1..1 (+1 = right), gas in 0..1, brake in 0..1]``, applied
    exactly as CarRacing-v3 applies them (no extra clipping).  With
    ``action_mode="steer_throttle"`` they are ``[steer, throttle]`` in
    ``[-1, 1]^2``; ``throttle > 0`` is gas, ``throttle < 0`` is brake
    (``gas = max(throttle, 0)``, ``brake = max(-throttle, 0)``), and the env
    applies the equivalent CarRacing action.  Observations: see the module docstring (``FEATURE_NAMES``,
    ``FEATURE_LOW``, ``FEATURE_HIGH``).

    The time limit is enforced by the env itself, in physics frames, so the
    registered ``CarRacingState-v0`` has no ``TimeLimit`` wrapper: ``truncated``
    is True on the step whose last frame is frame ``max_episode_frames``
    (1000, as CarRacing-v3's ``TimeLimit``) whatever ``action_repeat`` is.  Do
    not pass ``max_episode_steps`` to ``gymnasium.make`` (that would count
    agent steps, not frames).

    Keyword-only options:
        render_mode: None (nothing is ever drawn), ``"rgb_array"`` (``render()``
            returns the 400x600x3 CarRacing video frame) or ``"human"``.
        track_seed: None: a new random track on every reset, drawn from the
            env's RNG exactly as CarRacing does (so ``reset(seed=s)`` gives
            CarRacing-v3's track for seed ``s``).  An int: the same track on
            every reset whatever seed ``reset`` gets -- the track CarRacing-v3
            builds after ``reset(seed=track_seed)`` (e.g. 123 for a fixed
            training track).  The reset seed still seeds the env's RNG (only
            used for colours with ``domain_randomize``).
        action_repeat: each ``step`` applies the action for this many physics
            frames (stopping early when the episode ends or the frame limit is
            reached) and returns the sum of the per-frame rewards, so the
            episode score is unchanged.  ``info["frames"]`` counts frames.
        max_off_road_frames: TRAINING AID, changes the episode.  None (default)
            = CarRacing's rules.  An int M: the episode also terminates
            (``info["off_road_terminated"] = True``) on the M-th consecutive
            physics frame in which all four wheels are off the road.  Scores
            of such episodes are not standard CarRacing scores; evaluate with
            None.
        off_road_penalty: TRAINING AID, only with ``max_off_road_frames``:
            this amount is subtracted from the reward of the step in which the
            off-road termination happens (default 0.0: no change of reward).
        missed_tile_penalty: TRAINING AID, changes the reward.  0.0 (default)
            = CarRacing's rewards.  A positive amount P: P is subtracted from
            the reward of the step in which the car's projection on the centre
            line first gets ``MISSED_TILE_MARGIN`` tiles past a tile that no
            wheel has touched (once per episode; ``info["tiles_missed"]``
            counts every such tile).  Why: CarRacing's lap only closes when
            every tile is visited (the start tile is touched at the start, so
            its 95% rule never fires), and a lap left open costs every
            remaining frame until the time limit, a loss that lies hundreds of
            steps after the corner that caused it; the penalty puts that cost
            at the corner.  Once per episode, as the loss it stands for: a
            penalty per tile would also charge a car that leaves the road for
            every tile it passes, and teach it to crawl.
        missed_tile_penalty_ramp: TRAINING AID, only with ``missed_tile_penalty``.
            0 (default): the whole penalty from the start.  A number of env
            steps R: an episode reset with ``options={"env_steps": n}`` (the
            transitions collected so far, warm-up included, which
            td3_lightning's ``EnvLoop`` passes to every training reset) charges
            ``missed_tile_penalty * min(1, n / R)``, so a policy first learns to
            drive for the tiles and is charged for open laps once it drives; a
            reset without the option charges the whole penalty.  Why: charged
            from the start, the penalty makes speed look dangerous before the
            policy can steer, and some runs settle on crawling.
        max_stall_frames: TRAINING AID, changes the episode.  None (default)
            = CarRacing's rules.  An int M: the episode also terminates
            (``info["stall_terminated"] = True``) after M consecutive physics
            frames on the road in which no new tile was visited, as a lap left
            open: the ``missed_tile_penalty`` is charged then if it was not
            yet.  Why: a deterministic policy can come to rest in a tight
            corner (a throttle a hair below zero brakes a standing car) and
            wait out the time limit; in training the exploration noise never
            lets it, so nothing teaches the policy that creeping costs the lap.
            A frame with all four wheels off the road restarts the count:
            there ``max_off_road_frames`` decides, so a limit on the grass
            longer than M leaves a car time to drive back to the road.
        max_rest_frames: TRAINING AID, changes the episode.  None (default)
            = CarRacing's rules.  An int M: the episode also terminates
            (``info["rest_terminated"] = True``) after M consecutive physics
            frames with the hull slower than ``REST_SPEED``, on the road or
            off it, as a lap left open: the ``missed_tile_penalty`` is charged
            then if it was not yet.  Why: a throttle at or below zero brakes,
            and a standing car ignores the brake, so at rest every such action
            gives the same next state and the critic's gradient says nothing
            about the throttle; a policy that brakes to a standstill (a car
            spun off onto the grass, most often) stays there, since
            exploration noise around a full brake never reaches the gas.
            Ending such episodes at once makes braking to a standstill cost
            the lap in the states just before it, where the throttle still
            matters.  A driving car never comes to rest; from the start a
            car at full gas passes ``REST_SPEED`` in its first frame.
        charge_time_left: TRAINING AID, only with the aids that end an
            episode (``max_off_road_frames``, ``max_stall_frames``,
            ``max_rest_frames``).  False (default): such an end costs what
            those options say.  True: it also costs 0.1 per physics frame left
            to ``max_episode_frames``, what CarRacing charges a car that stands
            still until the time limit.  Why: every end those aids add is an
            exit the real rules do not have, and ending the episode stops the
            -0.1 per frame; a policy that cannot yet collect tiles learns to
            take that exit (brake, stall, end), its data is then all braking,
            and some runs never learn to drive.  Charged the time left, an
            early end is never cheaper than standing still under the real
            rules.
        frame_penalty: TRAINING AID, changes the reward.  0.0 (default) =
            CarRacing's -0.1 per physics frame.  A positive amount C: C more is
            charged for every physics frame.  Why: CarRacing's time charge is
            small beside a tile's reward, and a driver that is safe on every
            bend can still be slow; a larger charge asks for a faster lap.  It
            also makes an aid's early end cheaper relative to driving on (the
            discounted charges it saves), which ``missed_tile_penalty`` can
            make up.
        off_road_open_lap: TRAINING AID, only with ``max_off_road_frames``.
            False (default): an off-road termination costs ``off_road_penalty``
            only.  True: it ends the episode as an open lap, as
            ``max_stall_frames`` does: the (ramped) ``missed_tile_penalty`` is
            charged then if it was not yet.  Why: under the real rules a car
            that overshoots a hairpin far onto the grass and stops there has
            lost the lap, but in training its episode ended for free, while
            driving back could cost the penalty at a skipped tile, and fast
            policies learned to stop on the grass.
        recovery_starts: TRAINING AID, changes the episode.  0.0 (default)
            = CarRacing's start.  A fraction F: on that fraction of resets
            (drawn from the env RNG) the car starts at rest beside a track
            point k drawn uniformly from the lap, up to
            ``recovery_start_offset`` units to either side of the centre line
            (uniform), with its nose at a uniform random angle, and tiles
            0..k count as visited (without their reward), as for a car that
            has just spun off the road there.  ``info["start_tile"]`` is k
            (0 on a normal start).  Why: a policy that drives well rarely
            leaves the road in training, and ``max_off_road_frames`` ends the
            episodes in which it does, so it never learns to drive back from
            far off; under the real rules such a car stops on the grass.
        recovery_start_offset: the largest distance of a recovery start from
            the centre line, in world units (the road edge is at 6.67; the
            lateral-offset feature saturates at 33).
        recovery_start_angle: the largest angle, in degrees, between a
            recovery start's heading and the road's direction at k (uniform;
            180, the default, is any heading; 0 with offset 0 is a car at rest
            on the centre line, pointing along the lap).  Why: a driver that
            stopped on the road in front of a bend never saw such a state in
            training, and its critic there values braking over driving on.
        lap_complete_percent: fraction of tiles that must be visited before
            touching the start tile completes the lap (CarRacing's option).
        domain_randomize: CarRacing's colour randomisation (only affects
            ``render()``; with it, colours are drawn from the env RNG before
            the track, as in CarRacing).
        max_episode_frames: physics-frame time limit (default 1000 as
            CarRacing-v3's registration); None disables truncation.
        action_mode: ``"carracing"`` (default): CarRacing's 3 actions.
            ``"steer_throttle"``: 2 actions, gas and brake on one axis (see
            above).  A policy then coasts at a zero output instead of braking
            at half force (the midpoint of CarRacing's brake range), and it
            releases the brake without saturating its tanh.  The reward and
            the rules do not change: any steer_throttle action is a CarRacing
            action, so scores stay standard CarRacing scores.
        gas_at_rest: only with ``action_mode="steer_throttle"``, part of the
            policy (set it in ``env_kwargs``, for training and evaluation
            alike).  False (default): as above.  True: in a step that starts
            with the hull slower than ``REST_SPEED`` the throttle axis maps
            to gas only, ``gas = (throttle + 1) / 2`` (no brake).  Why: a
            standing car ignores the brake, so on the plain axis every
            throttle <= 0 leaves it standing; the critic's gradient there is
            zero, and a policy that has braked to a standstill (in a tight
            corner, or on the grass after a spin) stays there for the rest
            of the episode.  With the option the whole axis moves a standing
            car, more with a higher throttle, so the critic's gradient at rest
            is no longer zero by construction; only throttle -1 keeps the car
            standing.  A moving car is driven exactly as without it, and the
            rules are unchanged: every action is still a CarRacing action.
        aid_features: part of the policy (set it in ``env_kwargs``, for
            training and evaluation alike).  False (default): the 43 features
            above.  True: ``stall_time`` and ``tile_missed`` are appended (45
            features).  Why: ``max_stall_frames`` and ``missed_tile_penalty``
            make the value of a standing car depend on how long it has stood
            and on whether the penalty was already charged; without these
            entries the critic cannot tell a car that has just stopped from
            one about to be ended, nor an unspent penalty from a spent one.
        verbose: CarRacing's verbose flag (prints track generation details).
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": FPS}
    #: the keyword arguments that change CarRacing's rules to help training (the evaluation should not set them)
    TRAINING_AIDS = ("max_off_road_frames", "off_road_penalty", "missed_tile_penalty", "missed_tile_penalty_ramp",
                     "max_stall_frames", "max_rest_frames", "charge_time_left", "frame_penalty", "off_road_open_lap",
                     "recovery_starts")

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        track_seed: int | None = None,
        action_repeat: int = 1,
        max_off_road_frames: int | None = None,
        off_road_penalty: float = 0.0,
        missed_tile_penalty: float = 0.0,
        missed_tile_penalty_ramp: int = 0,
        max_stall_frames: int | None = None,
        max_rest_frames: int | None = None,
        charge_time_left: bool = False,
        frame_penalty: float = 0.0,
        off_road_open_lap: bool = False,
        recovery_starts: float = 0.0,
        recovery_start_offset: float = 25.0,
        recovery_start_angle: float = 180.0,
        lap_complete_percent: float = 0.95,
        domain_randomize: bool = False,
        max_episode_frames: int | None = CAR_RACING_MAX_FRAMES,
        action_mode: str = "carracing",
        gas_at_rest: bool = False,
        aid_features: bool = False,
        verbose: bool = False,
    ):
        if action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {', '.join(map(repr, ACTION_MODES))}, got {action_mode!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None, 'rgb_array' or 'human', got {render_mode!r}")
        if int(action_repeat) != action_repeat or action_repeat < 1:
            raise ValueError(f"action_repeat must be an integer >= 1, got {action_repeat!r}")
        if max_off_road_frames is not None and (
            int(max_off_road_frames) != max_off_road_frames or max_off_road_frames < 1
        ):
            raise ValueError(f"max_off_road_frames must be None or an integer >= 1, got {max_off_road_frames!r}")
        if max_stall_frames is not None and (int(max_stall_frames) != max_stall_frames or max_stall_frames < 1):
            raise ValueError(f"max_stall_frames must be None or an integer >= 1, got {max_stall_frames!r}")
        if max_rest_frames is not None and (int(max_rest_frames) != max_rest_frames or max_rest_frames < 1):
            raise ValueError(f"max_rest_frames must be None or an integer >= 1, got {max_rest_frames!r}")
        if not isinstance(off_road_open_lap, bool):
            raise ValueError(f"off_road_open_lap must be true or false, got {off_road_open_lap!r}")
        if not isinstance(gas_at_rest, bool):
            raise ValueError(f"gas_at_rest must be true or false, got {gas_at_rest!r}")
        if gas_at_rest and action_mode != "steer_throttle":
            raise ValueError("gas_at_rest needs action_mode 'steer_throttle' (it maps the throttle axis), "
                             f"got action_mode {action_mode!r}")
        if not isinstance(aid_features, bool):
            raise ValueError(f"aid_features must be true or false, got {aid_features!r}")
        if not isinstance(charge_time_left, bool):
            raise ValueError(f"charge_time_left must be true or false, got {charge_time_left!r}")
        if max_episode_frames is not None and (
            int(max_episode_frames) != max_episode_frames or max_episode_frames < 1
        ):
            raise ValueError(f"max_episode_frames must be None or an integer >= 1, got {max_episode_frames!r}")
        if not (math.isfinite(missed_tile_penalty) and missed_tile_penalty >= 0):
            raise ValueError(f"missed_tile_penalty must be a finite number >= 0, got {missed_tile_penalty!r}")
        if isinstance(frame_penalty, bool) or not (
            isinstance(frame_penalty, (int, float)) and math.isfinite(frame_penalty) and frame_penalty >= 0
        ):
            raise ValueError(f"frame_penalty must be a finite number >= 0 (charged per physics frame in training), "
                             f"got {frame_penalty!r}")
        if int(missed_tile_penalty_ramp) != missed_tile_penalty_ramp or missed_tile_penalty_ramp < 0:
            raise ValueError("missed_tile_penalty_ramp must be an integer >= 0 (env steps; 0 = no ramp), "
                             f"got {missed_tile_penalty_ramp!r}")
        if not (math.isfinite(recovery_starts) and 0.0 <= recovery_starts <= 1.0):
            raise ValueError(f"recovery_starts must be a fraction in [0, 1], got {recovery_starts!r}")
        if not (math.isfinite(recovery_start_offset) and recovery_start_offset >= 0):
            raise ValueError(f"recovery_start_offset must be a finite number >= 0, got {recovery_start_offset!r}")
        if not (math.isfinite(recovery_start_angle) and 0.0 <= recovery_start_angle <= 180.0):
            raise ValueError(f"recovery_start_angle must be in [0, 180] degrees, got {recovery_start_angle!r}")
        if isinstance(lap_complete_percent, bool) or not (
            isinstance(lap_complete_percent, (int, float)) and 0.0 < lap_complete_percent <= 1.0
        ):
            raise ValueError("lap_complete_percent must be a fraction of the tiles in (0, 1], "
                             f"got {lap_complete_percent!r}")
        if track_seed is not None and (int(track_seed) != track_seed or track_seed < 0):
            raise ValueError(f"track_seed must be None or a non-negative integer, got {track_seed!r}")
        super().__init__(
            render_mode=render_mode,
            verbose=verbose,
            lap_complete_percent=lap_complete_percent,
            domain_randomize=domain_randomize,
            continuous=True,
        )
        EzPickle.__init__(
            self,
            render_mode=render_mode,
            track_seed=track_seed,
            action_repeat=action_repeat,
            max_off_road_frames=max_off_road_frames,
            off_road_penalty=off_road_penalty,
            missed_tile_penalty=missed_tile_penalty,
            missed_tile_penalty_ramp=missed_tile_penalty_ramp,
            max_stall_frames=max_stall_frames,
            max_rest_frames=max_rest_frames,
            charge_time_left=charge_time_left,
            frame_penalty=frame_penalty,
            off_road_open_lap=off_road_open_lap,
            recovery_starts=recovery_starts,
            recovery_start_offset=recovery_start_offset,
            recovery_start_angle=recovery_start_angle,
            lap_complete_percent=lap_complete_percent,
            domain_randomize=domain_randomize,
            max_episode_frames=max_episode_frames,
            action_mode=action_mode,
            gas_at_rest=gas_at_rest,
            aid_features=aid_features,
            verbose=verbose,
        )
        self.track_seed = None if track_seed is None else int(track_seed)
        self.action_repeat = int(action_repeat)
        self.max_off_road_frames = None if max_off_road_frames is None else int(max_off_road_frames)
        self.off_road_penalty = float(off_road_penalty)
        self.missed_tile_penalty = float(missed_tile_penalty)
        self.missed_tile_penalty_ramp = int(missed_tile_penalty_ramp)
        self._penalty = self.missed_tile_penalty  # this episode's (see missed_tile_penalty_ramp)
        self.max_stall_frames = None if max_stall_frames is None else int(max_stall_frames)
        self.max_rest_frames = None if max_rest_frames is None else int(max_rest_frames)
        self.off_road_open_lap = off_road_open_lap
        self.charge_time_left = charge_time_left
        self.frame_penalty = float(frame_penalty)
        self.recovery_starts = float(recovery_starts)
        self.recovery_start_offset = float(recovery_start_offset)
        self.recovery_start_angle = float(recovery_start_angle)
        self.max_episode_frames = None if max_episode_frames is None else int(max_episode_frames)
        self.aid_features = aid_features
        self._low = np.concatenate([FEATURE_LOW, _AID_LOW]) if aid_features else FEATURE_LOW.copy()
        self._high = np.concatenate([FEATURE_HIGH, _AID_HIGH]) if aid_features else FEATURE_HIGH.copy()
        self.observation_space = spaces.Box(self._low.copy(), self._high.copy(), dtype=np.float32)
        self.action_mode = action_mode
        self.gas_at_rest = gas_at_rest
        if action_mode == "steer_throttle":
            self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.frames = 0
        self.off_road_frames = 0
        self.stall_frames = 0
        self.rest_frames = 0
        self.tiles_missed = 0
        self._near = 0
        self._progress = 0.0
        self._miss_frontier = 1
        self._start_tile = 0
        self._pts: np.ndarray | None = None

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        gym.Env.reset(self, seed=seed)
        self._destroy()
        # a fresh contact listener per episode, as CarRacing does
        self.world.contactListener_bug_workaround = FrictionDetector(self, self.lap_complete_percent)
        self.world.contactListener = self.world.contactListener_bug_workaround
        self.reward = 0.0
        self.prev_reward = 0.0
        self.tile_visited_count = 0
        self.t = 0.0
        self.new_lap = False
        self.road_poly = []
        if self.domain_randomize:
            randomize = True
            if isinstance(options, dict) and "randomize" in options:
                randomize = options["randomize"]
            self._reinit_colors(randomize)

        if self.track_seed is None:
            while not self._create_track():
                pass
        else:
            # build the track from its own generator; the env RNG is left untouched
            env_rng = self.np_random
            self._np_random = seeding.np_random(self.track_seed)[0]
            try:
                while not self._create_track():
                    pass
            finally:
                self._np_random = env_rng
        if self.recovery_starts > 0.0 and self.np_random.random() < self.recovery_starts:
            self.car, self._start_tile = self._recovery_start_car()
        else:
            self.car, self._start_tile = Car(self.world, *self.track[0][1:4]), 0
        self._prepare_track_arrays()

        # CarRacing's reset advances the world by one frame without an action
        # (tile contacts of that frame are credited to the first step's reward)
        self.car.step(_DT)
        self.world.Step(_DT, 6 * 30, 2 * 30)
        self.t += _DT
        self._reward_shown = self.reward  # the score CarRacing-v3's first frame displays

        self.frames = 0
        self.off_road_frames = 0
        self.stall_frames = 0
        self.rest_frames = 0
        self.tiles_missed = 0
        self._penalty = self._episode_penalty(options)
        self._near = self._start_tile
        # the next tile to check; the tiles up to the start tile are visited (tile 0 is under the car)
        self._miss_frontier = (self._start_tile + 1) % len(self.track)
        if self.render_mode == "human":
            self.render()
        return self._observe(), self._info(False, False, False)

    def _episode_penalty(self, options: dict | None) -> float:
        """The missed-tile penalty of an episode reset with ``options`` (see ``missed_tile_penalty_ramp``)."""
        steps = options.get("env_steps") if isinstance(options, dict) else None
        if self.missed_tile_penalty_ramp == 0 or steps is None:
            return self.missed_tile_penalty
        return self.missed_tile_penalty * min(1.0, int(steps) / self.missed_tile_penalty_ramp)

    def _recovery_start_car(self) -> tuple[Car, int]:
        """A car at rest beside a random track point k, at a random angle to the road, and k; tiles 0..k visited."""
        rng = self.np_random
        k = int(rng.integers(len(self.track)))
        beta, x, y = self.track[k][1:4]
        side = self.recovery_start_offset * float(rng.uniform(-1.0, 1.0))
        # the road's edges are P_k -/+ TRACK_WIDTH * (cos beta, sin beta)
        x, y = x + side * math.cos(beta), y + side * math.sin(beta)
        for tile in self.road[: k + 1]:
            tile.road_visited = True
        self.tile_visited_count = k + 1
        turn = math.radians(self.recovery_start_angle)
        return Car(self.world, beta + float(rng.uniform(-turn, turn)), x, y), k

    def _prepare_track_arrays(self) -> None:
        track = np.asarray(self.track, dtype=np.float64)  # rows: alpha, beta, x, y
        pts = np.ascontiguousarray(track[:, 2:4])
        seg = np.roll(pts, -1, axis=0) - pts  # segment i goes from point i to point i+1
        self._pts = pts
        self._seg = seg
        self._seg_inv_len2 = 1.0 / np.maximum(np.einsum("ij,ij->i", seg, seg), 1e-12)
        beta = track[:, 1]
        # unit tangent (direction of travel) at each point; the road edges are
        # P_i -/+ TRACK_WIDTH * (cos beta_i, sin beta_i)
        self._tan = np.stack([-np.sin(beta), np.cos(beta)], axis=1)
        # python lists for the scalar code in the per-step projection
        self._px = pts[:, 0].tolist()
        self._py = pts[:, 1].tolist()
        self._sx = seg[:, 0].tolist()
        self._sy = seg[:, 1].tolist()
        self._sinv = self._seg_inv_len2.tolist()
        self._tx = self._tan[:, 0].tolist()
        self._ty = self._tan[:, 1].tolist()
        self._n_track = len(pts)

    # ------------------------------------------------------------------- step
    def step(self, action):
        assert self.car is not None, "call reset() before step()"
        act = np.asarray(action, dtype=np.float64)  # CarRacing casts the action to float64 too
        if self.action_mode == "steer_throttle":
            throttle = float(act[1])
            steer, gas, brake = -float(act[0]), max(throttle, 0.0), max(-throttle, 0.0)
            if self.gas_at_rest and self._at_rest():  # a standing car: the whole axis is gas
                gas, brake = 0.5 * (throttle + 1.0), 0.0
        else:
            steer, gas, brake = -float(act[0]), float(act[1]), float(act[2])
        car = self.car
        world = self.world
        n_frames = self.action_repeat
        if self.max_episode_frames is not None:
            n_frames = max(1, min(n_frames, self.max_episode_frames - self.frames))
        total = 0.0
        terminated = lap_finished = out_of_field = off_road_end = stalled = rested = False
        for _ in range(n_frames):
            visited_before = self.tile_visited_count
            car.steer(steer)
            car.gas(gas)
            car.brake(brake)
            car.step(_DT)
            world.Step(_DT, 6 * 30, 2 * 30)
            self.t += _DT
            self.frames += 1
            # CarRacing-v3's reward book-keeping, frame by frame
            self._reward_shown = self.reward  # what CarRacing-v3's frame of this step displays
            self.reward -= 0.1
            car.fuel_spent = 0.0
            frame_reward = self.reward - self.prev_reward - self.frame_penalty
            self.prev_reward = self.reward
            if self.tile_visited_count == len(self.track) or self.new_lap:
                terminated = lap_finished = True
            x, y = car.hull.position
            if abs(x) > PLAYFIELD or abs(y) > PLAYFIELD:
                terminated, lap_finished, out_of_field = True, False, True
                frame_reward = -100
            # training aid: consecutive frames with every wheel off the road
            w = car.wheels
            if w[0].tiles or w[1].tiles or w[2].tiles or w[3].tiles:
                self.off_road_frames = 0
            else:
                self.off_road_frames += 1
            if (
                not terminated
                and self.max_off_road_frames is not None
                and self.off_road_frames >= self.max_off_road_frames
            ):
                terminated = off_road_end = True
                frame_reward -= self.off_road_penalty
            # training aid: consecutive frames on the road without a newly visited tile (off the road,
            # max_off_road_frames governs, and a car driving back finds its road again with a full count)
            if self.tile_visited_count > visited_before or self.off_road_frames:
                self.stall_frames = 0
            else:
                self.stall_frames += 1
            if not terminated and self.max_stall_frames is not None and self.stall_frames >= self.max_stall_frames:
                terminated = stalled = True
            if self.max_rest_frames is not None:  # training aid: consecutive frames at rest, anywhere
                self.rest_frames = self.rest_frames + 1 if self._at_rest() else 0
                if not terminated and self.rest_frames >= self.max_rest_frames:
                    terminated = rested = True
            total += frame_reward
            if self.render_mode == "human":
                self.render()
            if terminated:
                break
        truncated = self.max_episode_frames is not None and self.frames >= self.max_episode_frames
        obs = self._observe()
        first_miss = self.tiles_missed == 0
        open_lap = stalled or rested or (off_road_end and self.off_road_open_lap)
        if (self._newly_missed_tiles() or open_lap) and first_miss:
            total -= self._penalty
        if self.aid_features:  # the misses are counted from the position just observed
            self._state_vector(obs)[-1] = 1.0 if self.tiles_missed else 0.0
        if self.charge_time_left and (off_road_end or stalled or rested) and self.max_episode_frames is not None:
            total -= 0.1 * (self.max_episode_frames - self.frames)  # standing still to the time limit
        info = self._info(lap_finished, out_of_field, off_road_end, stalled, rested)
        return obs, total, terminated, truncated, info

    def _state_vector(self, obs: np.ndarray) -> np.ndarray:
        """The feature vector of the observation ``obs`` just returned by :meth:`_observe` (here: ``obs``)."""
        return obs

    def _at_rest(self) -> bool:
        """Whether the hull is slower than ``REST_SPEED``."""
        vx, vy = self.car.hull.linearVelocity
        return vx * vx + vy * vy < REST_SPEED * REST_SPEED

    def _newly_missed_tiles(self) -> int:
        """Tiles the car has now passed by ``MISSED_TILE_MARGIN`` without visiting them.

        Tile ``k`` lies between centre-line points ``k-1`` and ``k``.  Tiles are checked in
        order from a frontier that only moves forward, by less than half a lap per step (so
        driving backwards past the start checks nothing).
        """
        n = self._n_track
        ahead = (int(self._progress) - MISSED_TILE_MARGIN - self._miss_frontier) % n
        if ahead >= n // 2:
            return 0
        road = self.road
        missed = 0
        for k in range(self._miss_frontier, self._miss_frontier + ahead + 1):
            if not road[k % n].road_visited:
                missed += 1
        self._miss_frontier = (self._miss_frontier + ahead + 1) % n
        self.tiles_missed += missed
        return missed

    def _info(
        self, lap_finished: bool, out_of_field: bool, off_road_end: bool, stalled: bool = False,
        rested: bool = False,
    ) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "tiles_visited": self.tile_visited_count,
            "tiles_total": len(self.track),
            "lap_finished": lap_finished,
            "is_success": lap_finished,  # gymnasium's name for it: the lap was closed
            "out_of_playfield": out_of_field,
            "off_road_frames": self.off_road_frames,
            "off_road_terminated": off_road_end,
            "stall_terminated": stalled,
            "rest_terminated": rested,
            "tiles_missed": self.tiles_missed,
            "start_tile": self._start_tile,
        }

    # --------------------------------------------------------------- features
    def _locate(self, px: float, py: float) -> int:
        """Index of the track point nearest to (px, py), tracked from the last step."""
        n = self._n_track
        xs, ys = self._px, self._py
        best, best_d2 = self._near, math.inf
        for i in range(self._near - 4, self._near + 6 + 2 * self.action_repeat):
            i %= n
            dx = xs[i] - px
            dy = ys[i] - py
            d2 = dx * dx + dy * dy
            if d2 < best_d2:
                best, best_d2 = i, d2
        if best_d2 > _RELOCATE_DIST2:
            d = self._pts - (px, py)
            best = int(np.argmin(np.einsum("ij,ij->i", d, d)))
        return best

    def _observe(self) -> np.ndarray:
        car = self.car
        hull = car.hull
        px, py = hull.position
        ang = hull.angle
        fx, fy = -math.sin(ang), math.cos(ang)  # nose direction
        rx, ry = fy, -fx  # car's right
        vx, vy = hull.linearVelocity

        # projection of the hull centre onto the centre line (segment i, parameter u)
        n = self._n_track
        i = self._locate(px, py)
        self._near = i
        xs, ys, sx, sy, sinv = self._px, self._py, self._sx, self._sy, self._sinv
        u = ((px - xs[i]) * sx[i] + (py - ys[i]) * sy[i]) * sinv[i]
        if u < 0.0:
            i = (i - 1) % n
            u = ((px - xs[i]) * sx[i] + (py - ys[i]) * sy[i]) * sinv[i]
        u = min(max(u, 0.0), 1.0)
        j = (i + 1) % n
        cx, cy = xs[i] + u * sx[i], ys[i] + u * sy[i]
        tx = (1.0 - u) * self._tx[i] + u * self._tx[j]
        ty = (1.0 - u) * self._ty[i] + u * self._ty[j]
        tn = math.hypot(tx, ty)
        if tn > 1e-9:
            tx, ty = tx / tn, ty / tn
        else:  # opposite tangents (cannot happen on a generated track)
            tx, ty = sx[i] * math.sqrt(sinv[i]), sy[i] * math.sqrt(sinv[i])
        nx, ny = ty, -tx  # track's right
        lateral = ((px - cx) * nx + (py - cy) * ny) / TRACK_WIDTH
        s = i + u
        self._progress = s

        # look-ahead points on the centre line, in the car frame
        pos = s + _AHEAD_OFFSETS
        k = pos.astype(np.int64)
        frac = (pos - k)[:, None]
        k %= n
        q = self._pts[k] + frac * self._seg[k]
        q -= (px, py)
        ahead = q @ np.array([[rx, fx], [ry, fy]])
        ahead *= _AHEAD_INV_SCALE[:, None]

        w = car.wheels
        head = [
            (vx * fx + vy * fy) / _SPEED_SCALE,
            (vx * rx + vy * ry) / _SPEED_SCALE,
            -hull.angularVelocity / _YAW_SCALE,
            -w[0].joint.angle / _STEER_LIMIT,
            float(w[2].gas),
            w[0].omega * w[0].wheel_rad / _SPEED_SCALE,
            w[1].omega * w[1].wheel_rad / _SPEED_SCALE,
            w[2].omega * w[2].wheel_rad / _SPEED_SCALE,
            w[3].omega * w[3].wheel_rad / _SPEED_SCALE,
            0.0 if w[0].tiles else 1.0,
            0.0 if w[1].tiles else 1.0,
            0.0 if w[2].tiles else 1.0,
            0.0 if w[3].tiles else 1.0,
            lateral,
            fx * nx + fy * ny,
            fx * tx + fy * ty,
        ]
        tail = [
            s / n,
            self.tile_visited_count / n,
            min(self.off_road_frames / _COUNT_SCALE, 1.0),
        ]
        if self.aid_features:
            tail += [min(self.stall_frames / _COUNT_SCALE, 1.0), 1.0 if self.tiles_missed else 0.0]
        obs = np.empty(len(self._low), dtype=np.float32)
        obs[:_AHEAD_START] = head
        obs[_AHEAD_START:_AHEAD_STOP] = ahead.ravel()
        obs[_AHEAD_STOP:] = tail
        if not np.isfinite(obs).all():  # never hand out NaN/inf, whatever the physics did
            np.nan_to_num(obs, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        np.maximum(obs, self._low, out=obs)
        np.minimum(obs, self._high, out=obs)
        return obs

    # ------------------------------------------------------------------ misc
    def track_points(self) -> np.ndarray:
        """Copy of the centre-line points of the current track, shape (N, 2)."""
        if self._pts is None:
            raise RuntimeError("call reset() first")
        return self._pts.copy()
