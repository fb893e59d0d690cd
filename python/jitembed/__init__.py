"""jitembed: just-in-time embedding for generative-model training, from Python.

The C++ core (header-only library, compiled into ``jitembed._jitembed``) does the work; this package
re-exports it. See docs/python.md for the API by example, the exception table and the zero-copy / GIL rules.
"""

from . import _jitembed
from ._jitembed import *  # noqa: F401,F403
from ._jitembed import Error, _address, error_class, is_retryable  # noqa: F401
from ._model import Model, state_dict_hash  # noqa: F401

__version__ = "0.1.0"

#: errc name -> exception class (one class per jitembed::errc, each a subclass of Error and a builtin)
ERROR_CLASSES = dict(_jitembed._errc_classes)

__all__ = [name for name in dir(_jitembed) if not name.startswith("_")] + ["ERROR_CLASSES", "Model", "state_dict_hash",
                                                                            "__version__"]
