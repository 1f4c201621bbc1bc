"""CarRacing from pixels: ``CarRacingPixels-v0``.

The same physics, tracks, rewards, rules and options as :class:`CarRacingState`
(``track_seed``, ``action_repeat``, ``action_mode``, the training aids, ...), so
scores are standard CarRacing scores, but the observation is CarRacing-v3's own
96x96 top-down frame (the ``state_pixels`` view, dashboard included), preprocessed
and stacked:

* ``grayscale`` (default True): one luma channel (ITU-R 601) instead of RGB;
* ``crop_bottom`` (default 0): drop this many rows at the bottom (the dashboard is
  the bottom 12 rows);
* ``resize`` (default None): resize the (cropped) frame to ``resize x resize`` pixels
  (bilinear);
* ``frame_stack`` (default 4): the last ``frame_stack`` frames, oldest first; a reset
  fills the stack with copies of the first frame.

The observation is ``uint8`` of shape ``(frame_stack * channels, height, width)``,
channels first (the layout of the CNN encoder). With ``action_repeat`` k only the
last of the k physics frames is drawn, so a step costs one drawing whatever k is.
With ``grayscale=False``, no crop, no resize and ``frame_stack=1`` the observation is
exactly CarRacing-v3's (transposed to channels first).

Privileged observation: every ``reset`` and ``step`` also puts the state vector of
:class:`CarRacingState` (the same features, ``FEATURE_NAMES``) in ``info["privileged_obs"]``,
described by the env's ``privileged_observation_space``. A policy must not use it (it does
not see it when driving from pixels); a critic may, during training
(``data.privileged_critic``: asymmetric actor-critic).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import EzPickle

from td3_lightning.envs.car_racing import CarRacingState

PIXELS_ENV_ID = "CarRacingPixels-v0"
STATE_SIZE = 96  # CarRacing-v3's state_pixels frames are 96x96


class CarRacingPixels(CarRacingState):
    """:class:`CarRacingState` observed through stacked, preprocessed ``state_pixels`` frames.

    Keyword-only options: those of :class:`CarRacingState`, plus ``grayscale``,
    ``crop_bottom``, ``resize`` and ``frame_stack`` (see the module docstring).
    ``frame_stack`` is an attribute: the frame-sharing replay reads it.
    """

    # state_pixels: CarRacing's own 96x96 observation view, drawn by _frame
    metadata = {**CarRacingState.metadata, "render_modes": ["human", "rgb_array", "state_pixels"]}

    def __init__(
        self,
        *,
        grayscale: bool = True,
        crop_bottom: int = 0,
        resize: int | None = None,
        frame_stack: int = 4,
        **kwargs: Any,
    ) -> None:
        if int(frame_stack) != frame_stack or frame_stack < 1:
            raise ValueError(f"frame_stack must be an integer >= 1, got {frame_stack!r}")
        if int(crop_bottom) != crop_bottom or not 0 <= crop_bottom < STATE_SIZE - 8:
            raise ValueError(f"crop_bottom must be an integer in 0..{STATE_SIZE - 9}, got {crop_bottom!r}")
        if resize is not None and (int(resize) != resize or resize < 8):
            raise ValueError(f"resize must be None or an integer >= 8, got {resize!r}")
        super().__init__(**kwargs)
        EzPickle.__init__(self, grayscale=grayscale, crop_bottom=crop_bottom, resize=resize,
                          frame_stack=frame_stack, **kwargs)
        self.grayscale = bool(grayscale)
        self.crop_bottom = int(crop_bottom)
        self.resize = None if resize is None else int(resize)
        self.frame_stack = int(frame_stack)
        self.frame_channels = 1 if self.grayscale else 3
        height = self.resize or STATE_SIZE - self.crop_bottom
        width = self.resize or STATE_SIZE
        self.observation_space = spaces.Box(
            0, 255, (self.frame_stack * self.frame_channels, height, width), dtype=np.uint8
        )
        self._stack: np.ndarray | None = None
        #: what ``info["privileged_obs"]`` holds: the state vector of CarRacingState
        self.privileged_observation_space = spaces.Box(self._low.copy(), self._high.copy(), dtype=np.float32)
        self._state: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._stack = None
        return super().reset(seed=seed, options=options)

    def _frame(self) -> np.ndarray:
        """The current ``state_pixels`` frame, preprocessed, channels first."""
        shown, self.reward = self.reward, self._reward_shown  # draw the score CarRacing-v3's frame shows
        try:
            rgb = self._render("state_pixels")
        finally:
            self.reward = shown
        if self.crop_bottom:
            rgb = rgb[: STATE_SIZE - self.crop_bottom]
        if self.grayscale or self.resize:
            from PIL import Image

            image = Image.fromarray(np.ascontiguousarray(rgb))
            if self.grayscale:
                image = image.convert("L")
            if self.resize:
                image = image.resize((self.resize, self.resize), Image.BILINEAR)
            frame = np.asarray(image)
        else:
            frame = rgb
        frame = frame[None] if frame.ndim == 2 else frame.transpose(2, 0, 1)
        return np.ascontiguousarray(frame, dtype=np.uint8)

    def _info(self, *flags: bool) -> dict[str, Any]:
        info = super()._info(*flags)
        info["privileged_obs"] = self._state
        return info

    def _state_vector(self, obs: np.ndarray) -> np.ndarray:
        return self._state  # the frames carry no features; the privileged state does

    def _observe(self) -> np.ndarray:
        # the state vector: the privileged observation, and the track position that the
        # missed-tile book-keeping reads
        self._state = super()._observe()
        frame = self._frame()
        c = self.frame_channels
        if self._stack is None:
            self._stack = np.concatenate([frame] * self.frame_stack, axis=0)
        else:
            self._stack = np.concatenate([self._stack[c:], frame], axis=0)
        return self._stack.copy()
