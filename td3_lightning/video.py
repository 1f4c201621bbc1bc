"""Videos of episodes: mp4 or gif files, and animated GIFs in TensorBoard's Images tab."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np

from td3_lightning import _lightning
from td3_lightning.checkpointing import atomic_path


def video_fps(env: gym.Env) -> float:
    """Frames per second of a video with one frame per env step."""
    fps = float(env.metadata.get("render_fps") or 30)
    return fps / max(1, int(getattr(env.unwrapped, "action_repeat", 1)))


def write_video(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    """Write RGB frames to ``path`` (``.mp4`` with ffmpeg, or ``.gif``), atomically; where a file has that name (a
    second validate into one folder), to the first free ``<stem>-v1``, ``-v2``, ...: returns the path written."""
    import imageio.v2 as imageio

    path = unused_path(path)
    with atomic_path(path, suffix=f".tmp{path.suffix}") as tmp:  # imageio picks the format by suffix
        if path.suffix == ".gif":  # encoded in memory: a full disk fails the plain write, not the encoder's
            tmp.write_bytes(gif_bytes(frames, fps))
        else:
            with imageio.get_writer(tmp, fps=fps, codec="libx264", quality=7, macro_block_size=2) as writer:
                for frame in frames:
                    writer.append_data(frame)
    return path


def unused_path(path: Path) -> Path:
    """``path``, or the first of ``<stem>-v1<suffix>``, ``<stem>-v2<suffix>``, ... that nothing takes."""
    candidate, version = path, 0
    while candidate.exists() or candidate.is_symlink():
        version += 1
        candidate = path.with_name(f"{path.stem}-v{version}{path.suffix}")
    return candidate


def gif_bytes(frames: list[np.ndarray], fps: float) -> bytes:
    """RGB ``frames`` as an endlessly looping animated GIF at ``fps``, encoded in memory by Pillow in one call (a
    Ctrl-C mid-way leaves no open writer to fail again when it is collected)."""
    import io

    from PIL import Image

    images = [Image.fromarray(np.asarray(frame)) for frame in frames]
    encoded = io.BytesIO()
    images[0].save(encoded, format="GIF", save_all=True, append_images=images[1:], duration=1000 / fps, loop=0)
    return encoded.getvalue()


def log_tensorboard_video(trainer: L.Trainer, tag: str, frames: list[np.ndarray], fps: float,
                          max_width: int = 160) -> bool:
    """Add ``frames`` to every TensorBoard logger of ``trainer`` as an animated GIF (shown in
    TensorBoard's Images tab), downscaled to at most ``max_width`` pixels wide.  Returns whether
    a TensorBoard logger took it."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.compat.proto.summary_pb2 import Summary

    writers = [lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
    if not writers or not frames:
        return False
    stride = max(1, -(-frames[0].shape[1] // max_width))  # ceil(width / max_width)
    small = [np.ascontiguousarray(f[::stride, ::stride, :3]) for f in frames]
    height, width = small[0].shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif_bytes(small, fps))
    summary = Summary(value=[Summary.Value(tag=tag, image=image)])
    for writer in writers:
        _lightning.tensorboard_file_writer(writer).add_summary(summary, trainer.global_step)
        writer.flush()
    return True
