"""Types shared by the package's modules."""

from __future__ import annotations
import os
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]
