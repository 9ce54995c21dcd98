"""Build script for fxpsim's Cython extensions.

Every ``fxpsim/**/*.pyx`` becomes one extension module.  OpenMP is used when the
compiler supports it (set ``FXPSIM_NO_OPENMP=1`` to build without it).  Set
``FXPSIM_SANITIZE=1`` to build with ``-fsanitize=undefined,float-cast-overflow``
(used by ``.ci/run`` to catch undefined behaviour in the kernels).

No ``-march=native``: wheels must run on any x86-64.  Kernels that profit from
AVX2/AVX-512 use GCC/Clang function multi-versioning (``target_clones``) in
their C headers, so the best variant is picked at run time.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup


def _compiler_accepts(flags):
    """True when the C compiler builds and links an OpenMP program with ``flags``."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        return False
    src = "#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.c")
        with open(path, "w") as fh:
            fh.write(src)
        try:
            res = subprocess.run(cc.split() + [path, "-o", os.path.join(tmp, "t")] + flags,
                                 capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return res.returncode == 0


def _flags():
    compile_args = ["-O3", "-fno-strict-aliasing", "-Wno-unreachable-code"]
    link_args = []
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    if sys.platform != "win32" and not os.environ.get("FXPSIM_NO_OPENMP") \
            and _compiler_accepts(["-fopenmp"]):
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
        macros.append(("FXPSIM_OPENMP", "1"))
    if os.environ.get("FXPSIM_SANITIZE"):
        san = ["-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all",
               "-fno-omit-frame-pointer", "-fno-wrapv", "-g"]
        compile_args = [a for a in compile_args if a != "-O3"] + ["-O1"] + san
        link_args += san
    return compile_args, link_args, macros


def _extensions():
    compile_args, link_args, macros = _flags()
    exts = []
    for pyx in sorted(glob.glob(os.path.join("fxpsim", "**", "*.pyx"), recursive=True)):
        name = os.path.splitext(pyx)[0].replace(os.sep, ".")
        # every C header beside the .pyx (and its .pxd and included .pxi files) is a dependency: editing one
        # rebuilds the module
        here = os.path.dirname(pyx)
        depends = sorted(glob.glob(os.path.join(here, "*.h")) + glob.glob(os.path.join(here, "*.pxd"))
                         + glob.glob(os.path.join(here, "*.pxi")))
        exts.append(Extension(name, [pyx], include_dirs=[np.get_include(), here], depends=depends,
                              extra_compile_args=compile_args, extra_link_args=link_args,
                              define_macros=macros))
    return cythonize(exts, compiler_directives={"language_level": "3"})


setup(ext_modules=_extensions())
