"""``kesque spark compile-pyspark``: Spark's pyspark.zip with bytecode zipimport takes, written
atomically, the original kept and put back by ``--undo``, refusals that say why (issue 30: a
streaming query's source runner compiles pyspark from the zip at every start)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import zipfile

from kesque.cli import spark as cli

MODULES = {"pkg/__init__.py": "X = 1\n", "pkg/mod.py": "import pkg\nY = pkg.X + 41\n", "pkg/data.json": "{}"}


def _home(tmp_path, modules=MODULES):
    lib = tmp_path / "home" / "python" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "pyspark.zip", "w") as z:
        for name, text in modules.items():
            z.writestr(name, text)
    return str(tmp_path / "home"), str(lib / "pyspark.zip")


def _import(path: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import pkg.mod; print(pkg.mod.Y, pkg.mod.__file__)"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_compile_pyspark_adds_bytecode_zipimport_takes_and_undo_restores(tmp_path, capsys):
    home, path = _home(tmp_path)
    stock = open(path, "rb").read()
    assert _import(path).endswith("pyspark.zip/pkg/mod.py")
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 0
    assert "2 modules compiled" in capsys.readouterr().out
    assert open(path + ".orig", "rb").read() == stock
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == sorted([*MODULES, "pkg/__init__.pyc", "pkg/mod.pyc"])
        assert z.read("pkg/data.json") == b"{}"
    assert _import(path) == f"42 {path}/pkg/mod.pyc"  # zipimport took the pyc
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".pyspark.zip.")]
    # again: compiled from the kept original, which stays as it was
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 0
    assert open(path + ".orig", "rb").read() == stock
    assert cli.main(["compile-pyspark", "--spark-home", home, "--undo"]) == 0
    assert open(path, "rb").read() == stock and not os.path.exists(path + ".orig")
    assert cli.main(["compile-pyspark", "--spark-home", home, "--undo"]) == 1
    assert "nothing to undo" in capsys.readouterr().err


def test_compile_pyspark_after_a_reinstall_keeps_the_new_zip(tmp_path, capsys):
    """pyspark reinstalled over a compiled zip: the new stock zip becomes the original, and
    --undo over a stock zip refuses."""
    home, path = _home(tmp_path)
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 0
    with zipfile.ZipFile(path, "w") as z:  # what a reinstall leaves
        z.writestr("pkg/__init__.py", "X = 2\n")
        z.writestr("pkg/mod.py", "import pkg\nY = pkg.X + 40\n")
    assert cli.main(["compile-pyspark", "--spark-home", home, "--undo"]) == 1
    assert "not the compiled copy" in capsys.readouterr().err
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 0
    assert _import(path) == f"42 {path}/pkg/mod.pyc"
    with zipfile.ZipFile(path + ".orig") as z:
        assert z.read("pkg/__init__.py") == b"X = 2\n"


def test_compile_pyspark_refuses_clearly(tmp_path, capsys, monkeypatch):
    assert cli.main(["compile-pyspark", "--spark-home", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert "no pyspark.zip at" in err and "SPARK_HOME" in err
    home, path = _home(tmp_path)
    stock = open(path, "rb").read()
    monkeypatch.setattr(cli.os, "access", lambda p, mode: False)  # (the tests may run as root)
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 1
    assert "not writable" in capsys.readouterr().err
    assert open(path, "rb").read() == stock and not os.path.exists(path + ".orig")


def test_a_disk_error_halfway_leaves_spark_zip_and_no_temporary_file(tmp_path, capsys, monkeypatch):
    """ENOSPC while the compiled zip is written, and EIO at its fsync: the command fails saying
    why, Spark's zip is as it was, and no temporary file is left beside it."""
    home, path = _home(tmp_path)
    stock = open(path, "rb").read()
    real_pyc = cli._pyc
    calls = []

    def full_disk(source, filename):
        calls.append(filename)
        if len(calls) == 2:  # the second module: the temporary zip is half written
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pyc(source, filename)

    monkeypatch.setattr(cli, "_pyc", full_disk)
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert open(path, "rb").read() == stock
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".pyspark.zip.")]
    monkeypatch.setattr(cli, "_pyc", real_pyc)

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(cli.os, "fsync", failing_fsync)
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 1
    assert "Input/output error" in capsys.readouterr().err
    assert open(path, "rb").read() == stock
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".pyspark.zip.")]
    monkeypatch.undo()
    assert cli.main(["compile-pyspark", "--spark-home", home]) == 0  # and it works once the disk does
