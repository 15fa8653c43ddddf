"""``python -m rl_guards.tinker.backend --model DIR [--model NAME=DIR ...] [--port 0] [--root DIR]``

Serves until interrupted; prints the URL on its first line (give it to a recipe as ``base_url=...``, with
``TINKER_API_KEY=tml-local`` in the recipe's environment).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from rl_guards.tinker.backend import API_KEY, LocalTinker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_guards.tinker.backend", description=__doc__)
    parser.add_argument("--model", action="append", default=[], help="a model folder, or NAME=DIR (repeatable)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--root", default=None, help="checkpoint folder (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    models = {}
    for item in args.model:
        name, sep, folder = item.partition("=")
        models[name if sep else item] = folder if sep else item
    local = LocalTinker(models, root=args.root, seed=args.seed, threads=args.threads, port=args.port)
    if args.host != "127.0.0.1":
        parser.error("the local backend only listens on 127.0.0.1")
    local.start()
    print(local.url, flush=True)
    print(f"(set TINKER_API_KEY={API_KEY} for the client; Ctrl-C stops)", file=sys.stderr, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        local.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
