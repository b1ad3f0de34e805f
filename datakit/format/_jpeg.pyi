import numpy as np

_Readable = bytes | bytearray | memoryview | np.ndarray

LIBJPEG_TURBO_VERSION: str  # absent when built against another libjpeg

class UnsupportedJpeg(ValueError): ...

def decode_region(
    data: _Readable, scale_num: int, x: int, y: int, width: int, height: int, out: memoryview | np.ndarray,
    row_stride: int = 0, /,
) -> tuple[int, int]: ...
def decode_image(data: _Readable, out: memoryview | np.ndarray, /) -> tuple[int, int]: ...
def to_planar(
    src: _Readable, row_stride: int, height: int, width: int, out: memoryview | np.ndarray, mirror: bool, /
) -> None: ...
