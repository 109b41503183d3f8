"""Runs one of the small Java programs of tests/java (``java File.java``, no build) on text, for tests that check
an emulation of broker code against the JVM."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def run_java(program: str, text: str) -> str:
    """The standard output of ``tests/java/<program>`` given ``text`` on its standard input."""
    java = (os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME")
            else shutil.which("java"))
    assert java, "no java: Spark needs one too"
    source = Path(__file__).parent / "java" / program
    done = subprocess.run([java, str(source)], input=text, capture_output=True, text=True, encoding="utf-8",
                          check=True, timeout=300)
    return done.stdout
