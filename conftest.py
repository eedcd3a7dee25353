# `python -m pytest` puts the current folder first on sys.path, and there `import fastln` would find
# the source folder fastln/, which holds no compiled extension unless it was built in place. Test the
# installed package then: drop the checkout from sys.path before anything imports fastln.
import glob
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if not glob.glob(os.path.join(_here, "fastln", "_core*.so")) and not glob.glob(
    os.path.join(_here, "fastln", "_core*.pyd")
):
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
