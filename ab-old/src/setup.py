"""setup.py - the extension modules of pyproject.toml: kvstore
(python/kvstoremodule.c) and mooncake.store (python/mooncake_store.c).

build_ext first runs make for what they link: libkvstore.so.1, and the
Mooncake drop-in's and common/'s archives (linked privately into
mooncake.store, as mk/python.mk does), in $KVBATCH_BUILD (default: the
tree's build/, so an already built tree only checks it is up to date). The
wheel carries libkvstore.so.1 in kvbatch.libs/ beside the modules, which
find it through their run path ($ORIGIN): linked dynamically (DT_NEEDED),
so an LD_PRELOAD'ed libkvbatch.so still interposes on their calls. The
version is the Makefile's VERSION (the one version of every piece).
"""
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS = "kvbatch.libs"  # in the wheel's root, beside kvstore*.so and mooncake/


def version():
    with open(os.path.join(HERE, "Makefile"), encoding="utf-8") as f:
        m = re.search(r"^VERSION\s*:=\s*(\S+)\s*$", f.read(), re.M)
    if not m:
        raise RuntimeError("no VERSION := line in the Makefile")
    return m.group(1)


class build_with_make(build_ext):
    """make's libkvstore.so.1 and archives, then the extensions, then the library copied in."""

    def run(self):
        build = os.environ.get("KVBATCH_BUILD") or os.path.join(HERE, "build")
        build = os.path.abspath(build)
        lib = os.path.join(build, "lib")
        targets = [os.path.join(lib, t) for t in ("libkvstore.so", "libkvs_mooncake.a", "libkvs_common.a")]
        subprocess.check_call(["make", "-C", HERE, "--no-print-directory", "-j%d" % (os.cpu_count() or 1),
                               "BUILD=" + build] + targets)
        for ext in self.extensions:
            ext.library_dirs.append(lib)
            if ext.name == "mooncake.store":
                ext.extra_objects = [os.path.join(lib, "libkvs_mooncake.a"), os.path.join(lib, "libkvs_common.a")]
        super().run()
        dest = os.path.join(self.build_lib, LIBS)
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(lib, "libkvstore.so.1"), dest)

    def get_outputs(self):
        return super().get_outputs() + [os.path.join(self.build_lib, LIBS, "libkvstore.so.1")]


CFLAGS = ["-std=gnu11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-Wall", "-Wextra"]
# The library with its own NEEDED entry even where the linker drops unused ones.
NEEDED = ["-Wl,--no-as-needed", "-lkvstore", "-Wl,--as-needed"]

setup(
    version=version(),
    cmdclass={"build_ext": build_with_make},
    # setuptools' own build files apart from make's outputs
    options={"build": {"build_base": "build/pip"}, "egg_info": {"egg_base": "build/pip"}},
    ext_modules=[
        Extension(
            "kvstore",
            sources=["python/kvstoremodule.c"],
            include_dirs=["include"],
            extra_compile_args=CFLAGS,
            extra_link_args=NEEDED + ["-Wl,-rpath,$ORIGIN/" + LIBS],
        ),
        Extension(
            "mooncake.store",
            sources=["python/mooncake_store.c"],
            include_dirs=["include", "common", "transport", "include/mooncake", "mooncake"],
            extra_compile_args=CFLAGS,
            extra_link_args=NEEDED + ["-Wl,--version-script=python/mooncake_store.map",
                                      "-Wl,-rpath,$ORIGIN/../" + LIBS],
        ),
    ],
)
