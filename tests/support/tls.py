"""Certificates made by openssl for the HTTPS tests: a CA, a server and a client."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    assert binary is not None, "openssl is part of the machine's base system"
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def certificates(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=test-ca", cwd=directory)
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"),
                            ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)
        (directory / f"{name}.ext").write_text(extension + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile",
                f"{name}.ext", cwd=directory)
