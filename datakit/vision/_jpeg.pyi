import numpy as np

_Readable = bytes | bytearray | memoryview | np.ndarray

class UnsupportedJpeg(ValueError): ...

def decode_region(
    data: _Readable, scale_num: int, x: int, y: int, width: int, height: int, out: memoryview | np.ndarray, /
) -> tuple[int, int]: ...
def decode_image(data: _Readable, out: memoryview | np.ndarray, /) -> tuple[int, int]: ...
