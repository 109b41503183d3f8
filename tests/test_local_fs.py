"""Hadoop's ``file:`` filesystem without a ``chmod`` process per file and folder
(spark/java/reprocess/hadoop/PosixLocalFileSystem.java, :func:`reprocess.spark_env.local_fs_conf`).

It must give every file and folder the mode Hadoop's own local filesystem gives it, under any umask, and stay a
``LocalFileSystem`` (``FileSystem.getLocal`` casts to one).
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from reprocess import spark_env
from reprocess.spark_env import LOCAL_FS_CLASS, LOCAL_FS_JAR_ENV, local_fs_conf, local_fs_jar, spark_submit_conf

HADOOP_LOCAL_FS = "org.apache.hadoop.fs.LocalFileSystem"


def _modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): oct(stat.S_IMODE(p.stat().st_mode))
            for p in sorted(root.rglob("*"), key=str)}


def _exercise(spark, impl: str, root: Path, umask: str) -> dict[str, str]:
    """Folders, files (with their .crc), explicit modes and a sticky folder, through a new instance of ``impl``."""
    jvm = spark._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    conf.set("fs.file.impl", impl)
    conf.set("fs.permissions.umask-mode", umask)
    fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == impl
    path = jvm.org.apache.hadoop.fs.Path
    perm = jvm.org.apache.hadoop.fs.permission.FsPermission
    try:
        assert fs.mkdirs(path(f"file://{root}/a/b"))
        out = fs.create(path(f"file://{root}/a/b/part-0.parquet"))
        out.write(b"payload")
        out.close()
        fs.create(path(f"file://{root}/a/empty")).close()
        fs.setPermission(path(f"file://{root}/a/empty"), perm("640"))
        assert fs.mkdirs(path(f"file://{root}/shared"))
        fs.setPermission(path(f"file://{root}/shared"), perm("1777"))  # sticky: the chmod fallback
        with pytest.raises(Exception, match="missing"):  # an IOException naming the path (chmod's or ours)
            fs.setPermission(path(f"file://{root}/missing"), perm("600"))
    finally:
        fs.close()
    return _modes(root)


@pytest.mark.spark
def test_sessions_use_the_posix_local_filesystem_and_it_is_still_a_local_filesystem(spark, tmp_path):
    assert local_fs_jar() is not None, "make venv builds .venv/share/reprocess/reprocess-hadoop.jar (needs javac)"
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    assert jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf).getClass().getName() \
        == LOCAL_FS_CLASS
    assert jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf).getClass().getName() == LOCAL_FS_CLASS
    out = tmp_path / "written"
    spark.range(40).selectExpr("id", "id % 4 AS b").write.partitionBy("b").parquet(str(out))
    assert spark.read.parquet(str(out)).count() == 40
    modes = _modes(out)
    assert any(k.endswith(".parquet") for k in modes)
    assert any(k.endswith(".crc") for k in modes)
    for name, mode in modes.items():  # Hadoop's defaults under its default umask 022
        assert mode == ("0o755" if (out / name).is_dir() else "0o644"), (name, mode)


@pytest.mark.spark
@pytest.mark.parametrize("umask", ["022", "077", "027"])
def test_modes_equal_hadoops_own_local_filesystem(spark, tmp_path, umask):
    ours = _exercise(spark, LOCAL_FS_CLASS, tmp_path / "ours", umask)
    hadoop = _exercise(spark, HADOOP_LOCAL_FS, tmp_path / "hadoop", umask)
    assert ours == hadoop
    assert ours["shared"] == "0o1777"
    assert ours["a/empty"] == "0o640"
    private = umask == "077"
    assert ours["a/b/part-0.parquet"] == ("0o600" if private else "0o640" if umask == "027" else "0o644")
    assert ours["a/b/.part-0.parquet.crc"] == ours["a/b/part-0.parquet"]
    assert ours["a/b"] == ("0o700" if private else "0o750" if umask == "027" else "0o755")


@pytest.mark.unit
def test_the_jar_goes_on_driver_and_executor_class_paths_and_can_be_switched_off(monkeypatch, tmp_path):
    jar = tmp_path / "reprocess-hadoop.jar"
    monkeypatch.setattr(spark_env, "default_local_fs_jar", lambda: jar)
    monkeypatch.delenv(LOCAL_FS_JAR_ENV, raising=False)
    assert local_fs_conf() == {}  # not built: Hadoop's own filesystem, nothing on the class path
    jar.write_bytes(b"PK")
    expected = {"spark.driver.defaultExtraClassPath": str(jar), "spark.executor.defaultExtraClassPath": str(jar),
                "spark.hadoop.fs.file.impl": LOCAL_FS_CLASS}
    assert local_fs_conf() == expected
    submit = spark_submit_conf("/venv/bin/python")
    assert {k: submit[k] for k in expected} == expected  # the DAGs' spark-submit and the Connect server
    monkeypatch.setenv(LOCAL_FS_JAR_ENV, "")
    assert local_fs_conf() == {}
    assert "spark.hadoop.fs.file.impl" not in spark_submit_conf("/venv/bin/python")
    elsewhere = tmp_path / "nodes" / "fs.jar"
    monkeypatch.setenv(LOCAL_FS_JAR_ENV, str(elsewhere))
    assert local_fs_conf() == {}
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"PK")
    assert local_fs_conf()["spark.executor.defaultExtraClassPath"] == str(elsewhere)


@pytest.mark.unit
def test_the_image_builds_the_jar_where_its_environment_points():
    root = Path(__file__).resolve().parents[1]
    dockerfile = (root / "docker" / "Dockerfile").read_text()
    env = dict(line.split(None, 1)[1].split("=", 1) for line in dockerfile.splitlines() if line.startswith("ENV "))
    jar = env[LOCAL_FS_JAR_ENV]
    # the jar is written where the image's runs look for it, by the build make venv uses
    assert f'RUN bash /opt/reprocess/spark/java/build.sh python "${LOCAL_FS_JAR_ENV}"' in dockerfile
    assert "bash spark/java/build.sh $(BIN)/python $(LOCAL_FS_JAR)" in (root / "Makefile").read_text()
    assert '"$here"/reprocess/hadoop/*.java' in (root / "spark" / "java" / "build.sh").read_text()
    sources = {p.name for p in (root / "spark" / "java" / "reprocess" / "hadoop").glob("*.java")}
    assert sources == {"PosixLocalFileSystem.java", "ConditionalLocalFileSystem.java"}
    assert jar.startswith("/opt/reprocess/")
    assert "openjdk-17-jdk-headless" in dockerfile


def _fake_bin(tmp_path: Path, apt_ok: bool) -> Path:
    """A PATH with no javac and an apt-get that 'installs' one (or fails to; its update works)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "rm", "flock", "grep", "seq", "sleep"):  # what the recipe line and dev/apt.sh run
        (bin_dir / tool).symlink_to(shutil.which(tool))
    javac = bin_dir / "javac"
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n[ \"$1\" = update ] && exit 0\n"
        + (f"[ \"$1\" = install ] && printf '#!/bin/sh\\n' > {javac} && /bin/chmod +x {javac}\n"
           "exit 0\n" if apt_ok else "exit 100\n"))
    subprocess.run(["/bin/chmod", "+x", str(bin_dir / "apt-get")], check=True)
    return bin_dir


@pytest.mark.unit
@pytest.mark.parametrize("apt_ok", [True, False])
def test_make_test_installs_a_jdk_when_javac_is_missing_and_builds_the_jar_again(tmp_path, apt_ok):
    root = Path(__file__).resolve().parents[1]
    bin_dir = _fake_bin(tmp_path, apt_ok)
    stamp = tmp_path / ".local-fs"
    stamp.touch()
    # the recipe line of `make test` (Makefile), with its $$ unescaped
    line = next(ln.strip().lstrip("@") for ln in (root / "Makefile").read_text().splitlines()
                if "dev/jdk.sh" in ln and "$(LOCAL_FS)" in ln)
    line = line.replace("$$", "$").replace("$(LOCAL_FS)", str(stamp))
    done = subprocess.run(["/bin/bash", "-c", line], cwd=root, env={"PATH": str(bin_dir)}, capture_output=True,
                          text=True)
    if apt_ok:  # installed: the recipe goes on, and the jar's stamp is gone so that make builds the jar again
        assert done.returncode == 0, done.stderr
        assert "installing openjdk-17-jdk-headless" in done.stdout
        assert (bin_dir / "javac").exists()
        assert not stamp.exists()
    else:  # the install failed: make test stops here, loudly
        assert done.returncode != 0
        assert stamp.exists()
    again = subprocess.run(["/bin/bash", "dev/jdk.sh"], cwd=root, env={"PATH": str(bin_dir)}, capture_output=True)
    if apt_ok:  # with javac there, nothing to do
        assert again.returncode == 0
    else:
        assert again.returncode == 1
        assert b"apt-get could not install" in again.stderr
