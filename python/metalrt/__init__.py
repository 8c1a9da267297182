"""metalrt: run large language models on Apple-silicon GPUs through Metal."""
from . import _metalrt  # noqa: F401
