"""Runs one of the small Java programs of tests/java (``java File.java``, no build) on text, for tests that check
an emulation of broker code against the JVM, or against the broker's own classes."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

# the Debian activemq package's jars (make services installs it): ActiveMQ Classic's own classes, XBean and Spring
ACTIVEMQ_LIB = Path("/usr/share/activemq/lib")


def activemq_classpath() -> str:
    jars = sorted(glob.glob(str(ACTIVEMQ_LIB / "*.jar")) + glob.glob(str(ACTIVEMQ_LIB / "optional" / "*.jar")))
    assert any(j.endswith("activemq-broker.jar") for j in jars), (
        f"no ActiveMQ Classic jars in {ACTIVEMQ_LIB}: `make services` installs Debian's activemq")
    return os.pathsep.join(jars)


def run_java(program: str, text: str, *args: str, classpath: str | None = None) -> str:
    """The standard output of ``tests/java/<program>`` given ``text`` on its standard input."""
    java = (os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME")
            else shutil.which("java"))
    assert java, "no java: Spark needs one too"
    source = Path(__file__).parent / "java" / program
    command = [java, *(["-cp", classpath] if classpath else []), str(source), *args]
    done = subprocess.run(command, input=text, capture_output=True, text=True, encoding="utf-8", check=True,
                          timeout=300)
    return done.stdout
