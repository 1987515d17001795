"""The parameter-server example runs, converges and exits 0."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "param_server.py")


def test_param_server_converges():
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
    p = subprocess.run([sys.executable, EXAMPLE, "--workers", "3", "--k", "2", "--rounds", "20",
                        "--dim", "20000", "--samples", "128"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240,
                       text=True)
    assert p.returncode == 0, p.stdout
    assert "converged" in p.stdout
    losses = [float(m) for m in re.findall(r"^round +\d+  loss (\S+)", p.stdout, re.M)]
    assert len(losses) == 21 and losses[-1] < 0.01 * losses[0]
    # subset reduce: every round names exactly k=2 workers
    rounds = re.findall(r"gradients from workers \[(\d+), (\d+)\]", p.stdout)
    assert len(rounds) == 20
