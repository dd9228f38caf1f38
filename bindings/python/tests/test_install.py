"""The package installs the way pip installs things, against a real sshd.

- `pip install` of the source (Debian's pip, setuptools and wheel, no PyPI:
  --no-build-isolation --no-index) into a fresh venv: `import asp` there finds
  an installed libasp through the system's loader (a directory on
  LD_LIBRARY_PATH stands for /usr/local/lib or /usr/lib/<multiarch>), without
  $ASP_LIBRARY and with no build tree next to it, and runs a command.
- `make python-wheel`: a wheel that carries libasp.so.0 is tagged for its
  platform (not py3-none-any), names in its metadata every library the .so
  needs (its DT_NEEDED entries), and once installed loads its own copy with
  no help from the environment.

Each test copies what it builds from into a temporary directory: the tree
is left as it is.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import asp  # noqa: E402
from sshd_fixture import ROOT, SshdFixture  # noqa: E402

BINDING = os.path.join(ROOT, "bindings", "python")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-pip, -setuptools, -wheel, -venv
PIP_FLAGS = ["--no-build-isolation", "--no-index", "--no-deps", "--quiet", "--disable-pip-version-check"]

FX = None
TMP = None

# Open the fixture's sandbox (argv[1]), run a command, say where libasp came from.
PROGRAM = """
import json, sys
import asp
with asp.open(sys.argv[1]) as sb:
    r = sb.exec("echo installed")
print(json.dumps({"lib": asp.library_path, "at": asp.__file__, "out": r.stdout.decode()}))
"""


def setUpModule():
    global FX, TMP
    FX = SshdFixture().start()
    TMP = tempfile.mkdtemp(prefix="asp-pip-")


def tearDownModule():
    if FX:
        FX.stop()
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def venv(name):
    """A fresh venv (Debian's python, its system site-packages: pip's build tools come from there)."""
    d = os.path.join(TMP, name)
    run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", d])
    return os.path.join(d, "bin", "python")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ASP_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


def use(python, **env):
    """Run PROGRAM with python from a directory that holds nothing of libasp."""
    out = run([python, "-c", PROGRAM, FX.config], cwd=TMP, env=clean_env(**env))
    return json.loads(out)


def needed(so):
    """The DT_NEEDED sonames of a shared object."""
    out = run(["readelf", "-d", so])
    return [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines() if "(NEEDED)" in line]


class TestInstall(unittest.TestCase):

    def test_pip_install_finds_the_system_library(self):
        src = os.path.join(TMP, "src")
        shutil.copytree(BINDING, src, ignore=shutil.ignore_patterns(
            "tests", "build", "*.egg-info", "__pycache__", "libasp.so*"))
        libdir = os.path.join(TMP, "syslib")
        os.mkdir(libdir)
        shutil.copy(os.path.realpath(asp.library_path), os.path.join(libdir, "libasp.so.0"))
        python = venv("venv-src")
        run([python, "-m", "pip", "install", *PIP_FLAGS, src])
        got = use(python, LD_LIBRARY_PATH=libdir)
        self.assertEqual(got["out"], "installed\n")
        self.assertTrue(got["at"].startswith(os.path.join(TMP, "venv-src")), got["at"])
        # Through the loader (find_library's name or the SONAME), not a path of a copy.
        self.assertIn(got["lib"], ("libasp.so.0", "libasp.so"), got)

    def test_make_python_wheel_is_platform_tagged_and_self_contained(self):
        out = os.path.join(TMP, "wheel")
        run(["make", "--no-print-directory", "-s", "-C", ROOT, "python-wheel", "WHEEL_DIR=" + out])
        wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        self.assertEqual(wheels[0], f"asp-{asp.__version__}-py3-none-{plat}.whl")
        whl = os.path.join(out, wheels[0])
        with zipfile.ZipFile(whl) as z:
            names = z.namelist()
            self.assertIn("asp/libasp.so.0", names)
            meta = z.read(f"asp-{asp.__version__}.dist-info/METADATA").decode()
            wheel_file = z.read(f"asp-{asp.__version__}.dist-info/WHEEL").decode()
            so = os.path.join(TMP, "bundled.so")
            with open(so, "wb") as f:
                f.write(z.read("asp/libasp.so.0"))
        self.assertIn("Root-Is-Purelib: false", wheel_file)
        self.assertIn(f"Tag: py3-none-{plat}", wheel_file)
        libs = needed(so)
        self.assertIn("libssh2.so.1", libs)
        for soname in libs:
            self.assertIn(soname, meta, f"the wheel's metadata does not name {soname}, which libasp.so.0 needs")

        python = venv("venv-wheel")
        run([python, "-m", "pip", "install", *PIP_FLAGS, whl])
        got = use(python)
        self.assertEqual(got["out"], "installed\n")
        self.assertEqual(got["lib"], os.path.join(os.path.dirname(got["at"]), "libasp.so.0"), got)


if __name__ == "__main__":
    unittest.main()
