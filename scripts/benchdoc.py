"""What the benchmark scripts share: the machine's description, the git
revision, and putting a table into docs/BENCHMARKS.md between markers."""
import os
import platform
import re
import subprocess


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} cores (nproc), {model or platform.processor()}, {platform.system()} {platform.release()}"


def revision():
    """The checkout's revision; $SHOAL_REVISION where there is no git (a GPU
    machine running binaries built elsewhere: make gpubin writes it)."""
    if os.environ.get("SHOAL_REVISION"):
        return os.environ["SHOAL_REVISION"]

    def git(*args):
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
        except OSError:
            return "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def put_section(doc, name, table, heading):
    """Replaces what stands between <!-- name:begin --> and <!-- name:end -->
    in doc with table, adding the markers under heading if they are missing."""
    with open(doc) as f:
        text = f.read()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text:
        text += f"\n## {heading}\n\n{begin}\n{end}\n"
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{table}\n{end}", text, flags=re.S)
    with open(doc, "w") as f:
        f.write(text)
