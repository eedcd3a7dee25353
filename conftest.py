# `python -m pytest` puts the current folder first on sys.path, and there `import fastln` would find
# the source folder fastln/, which holds no compiled extension unless it was built in place. So:
# - no in-place build: test the installed package. Drop the checkout from sys.path before anything
#   imports fastln, and set PYTHONSAFEPATH so that the Python subprocesses the tests start do not put
#   their working folder first either.
# - an in-place build (python setup.py build_ext --inplace): test it, in subprocesses too.
import glob
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_inplace = glob.glob(os.path.join(_here, "fastln", "_core*.so")) + glob.glob(
    os.path.join(_here, "fastln", "_core*.pyd")
)
if _inplace:
    _pp = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = _here + (os.pathsep + _pp if _pp else "")
else:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    os.environ["PYTHONSAFEPATH"] = "1"
