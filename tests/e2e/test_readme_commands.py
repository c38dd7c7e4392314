"""The README's run command, as a test: set-up is a no-op here, the demo must reach 0.9."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```bash", 1)[1].split("```", 1)[0]
    assert "bash scripts/demo.sh" in first_block
    assert "bash scripts/test.sh" in first_block
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_demo_command_trains_transforms_and_scores(tmp_path):
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh"), "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    match = re.search(r"accuracy on (\d+) held-out digits: ([0-9.]+)", proc.stdout)
    assert match, proc.stdout
    assert int(match.group(1)) == 450
    assert float(match.group(2)) >= 0.9
    outs = list((tmp_path / "demo" / "output").rglob("*.png.out"))
    assert len(outs) == 450
