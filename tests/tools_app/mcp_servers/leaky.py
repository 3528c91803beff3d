"""A stdio MCP server that prints secrets of its environment where the protocol has no place for them.

    python leaky.py serve NAME...   # a stray line on stdout, two on stderr, then the demo server's tools
    python leaky.py exit NAME...    # the same lines, then exit 1 (it never answers the handshake)

Each variable NAME is printed as ``NAME=value``.
"""

import os
import sys

leaks = " ".join(f"{name}={os.environ.get(name, '<unset>')}" for name in sys.argv[2:])
# Not JSON-RPC: the client's SDK fails to parse it and says so, quoting the line.
sys.stdout.write(f"stray output {leaks}\n")
sys.stdout.flush()
sys.stderr.write(f"starting with {leaks}\n")
sys.stderr.write(f"config dump: {leaks}\n")
sys.stderr.flush()

if sys.argv[1] == "exit":
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo import server  # noqa: E402

server.run()
