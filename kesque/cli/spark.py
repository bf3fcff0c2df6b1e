"""``kesque spark compile-pyspark [--spark-home DIR] [--undo]``: bytecode for Spark's pyspark.zip.

Spark starts its Python processes with ``$SPARK_HOME/python/lib/pyspark.zip`` first on their
``PYTHONPATH`` (``PythonUtils.sparkPythonPath``; a pip-installed pyspark ships the zip too, and
its ``SPARK_HOME`` is the package directory). The zip holds sources only, and Python writes no
bytecode cache into a zip, so every fresh interpreter compiles the pyspark modules it imports:
0.5-0.6 s of CPU more per start. Executors' task workers fork from a daemon and pay it once,
but every streaming query with a Python data source (format ``kesque``) starts a fresh source
runner, which pays it each time (docs/spark.md).

This command rewrites the zip with the same entries plus a ``.pyc`` beside each ``.py``, as
``zipimport`` looks them up (unchecked hash-based pycs, PEP 552: taken without reading the
source), compiled by the Python that runs the command. Spark's workers must run the same Python
version (``PYSPARK_PYTHON``) to use them; any other version finds a foreign magic number and
compiles the sources, as before. The new zip is written beside the old one and renamed over it
(fsynced first); the original is kept as ``pyspark.zip.orig``, and ``--undo`` puts it back.
Reinstalling pyspark puts a fresh zip in place: run the command again. Opt-in: nothing in kesque
runs it on its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import marshal
import os
import shutil
import sys
import tempfile
import warnings
import zipfile

MARKER = b"kesque spark compile-pyspark"


class CompileError(Exception):
    pass


def spark_home(given: str | None = None) -> str:
    """``given``, else ``$SPARK_HOME``, else a pip-installed pyspark's package directory (where
    pyspark's own launcher looks when ``SPARK_HOME`` is unset)."""
    if given:
        return given
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise CompileError("no SPARK_HOME and no pyspark installed: give --spark-home")
    return list(spec.submodule_search_locations)[0]


def zip_path(home: str) -> str:
    return os.path.join(home, "python", "lib", "pyspark.zip")


def is_compiled(path: str) -> bool:
    with zipfile.ZipFile(path) as z:
        return z.comment.startswith(MARKER)


def _pyc(source: bytes, filename: str) -> bytes | None:
    """An unchecked hash-based pyc of ``source``, its code named ``filename`` as zipimport names
    the code it compiles itself (the zip's path, then the entry's): tracebacks read the same."""
    source = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    try:
        with warnings.catch_warnings():  # a cached module warns no more than this
            warnings.simplefilter("ignore")
            code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError):
        return None  # left to be compiled (and to fail) where it is imported, as before
    flags = (0b01).to_bytes(4, "little")  # hash-based, source not checked
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(tmp: str, path: str) -> None:
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


def _write_atomically(dst: str, mode_of: str, write) -> None:
    """``write(f)`` into a temporary file in ``dst``'s directory, fsynced, given ``mode_of``'s
    permissions and renamed over ``dst`` (the directory fsynced too): ``dst`` is the old file or
    the new one, never a part."""
    fd, tmp = tempfile.mkstemp(prefix=".pyspark.zip.", dir=os.path.dirname(os.path.abspath(dst)))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, os.stat(mode_of).st_mode & 0o777)
        _replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def compile_zip(src: str, dst: str, name_as: str | None = None) -> tuple[int, int]:
    """Write ``dst``: ``src``'s entries plus a pyc beside each ``.py``, atomically
    (:func:`_write_atomically`). ``name_as``: where the zip will be imported from (default
    ``dst``). Returns (pycs written, sources left uncompiled)."""
    where = os.path.abspath(name_as or dst)
    counts = [0, 0]  # written, skipped

    def write(f) -> None:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(f, "w") as zout:
            names = set(zin.namelist())
            for info in zin.infolist():
                data = zin.read(info)
                zout.writestr(info, data)
                if not info.filename.endswith(".py") or info.filename + "c" in names:
                    continue
                pyc = _pyc(data, os.path.join(where, info.filename))
                if pyc is None:
                    counts[1] += 1
                    continue
                out = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
                out.compress_type = zipfile.ZIP_DEFLATED
                out.external_attr = info.external_attr
                zout.writestr(out, pyc)
                counts[0] += 1
            zout.comment = MARKER + b" python %d.%d" % sys.version_info[:2]

    _write_atomically(dst, src, write)
    return counts[0], counts[1]


def _copy_atomically(src: str, dst: str) -> None:
    def write(f) -> None:
        with open(src, "rb") as g:
            shutil.copyfileobj(g, f)

    _write_atomically(dst, src, write)


def compile_in_place(home: str) -> str:
    path = zip_path(home)
    orig = path + ".orig"
    if not os.path.isfile(path):
        raise CompileError(f"no pyspark.zip at {path}: is {home} a Spark installation (SPARK_HOME)?")
    if not os.access(os.path.dirname(path), os.W_OK) or not os.access(path, os.W_OK):
        raise CompileError(f"{path} is not writable by this user: run as the owner of the Spark installation")
    if not is_compiled(path):  # Spark's own zip (first run, or pyspark reinstalled since): keep it
        _copy_atomically(path, orig)
    elif not os.path.isfile(orig):
        raise CompileError(f"{path} is already compiled and {orig} is missing: reinstall pyspark to start over")
    written, skipped = compile_zip(orig, path)
    v = "%d.%d" % sys.version_info[:2]
    return (
        f"{path}: {written} modules compiled for Python {v} ({skipped} left as sources); Spark's Python "
        f"processes use them when they run Python {v} (PYSPARK_PYTHON). The original is {orig}: "
        "`kesque spark compile-pyspark --undo` puts it back."
    )


def undo(home: str) -> str:
    path = zip_path(home)
    orig = path + ".orig"
    if not os.path.isfile(orig):
        raise CompileError(f"nothing to undo: no {orig}")
    if os.path.isfile(path) and not is_compiled(path):
        raise CompileError(f"{path} is not the compiled copy (pyspark reinstalled?): left as it is, and {orig}")
    if not os.access(os.path.dirname(path), os.W_OK):
        raise CompileError(f"{os.path.dirname(path)} is not writable by this user")
    _replace(orig, path)
    return f"{path}: Spark's original zip is back"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kesque spark", description="Helpers for Spark deployments of format kesque.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser(
        "compile-pyspark",
        help="add bytecode to $SPARK_HOME/python/lib/pyspark.zip, so Spark's fresh Python processes "
        "(a streaming query's source runner) do not compile pyspark at every start",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("--spark-home", help="the Spark installation (default: $SPARK_HOME, else pip's pyspark)")
    c.add_argument("--undo", action="store_true", help="put Spark's original pyspark.zip back")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        home = spark_home(args.spark_home)
        print(undo(home) if args.undo else compile_in_place(home))
    except (CompileError, OSError, zipfile.BadZipFile) as e:
        print(f"kesque spark compile-pyspark: {e}", file=sys.stderr)
        return 1
    return 0
