"""In-jail one-shot program runner: runs ONE untrusted program to its end and reports how it ended.

Runs inside nsjail under the system ``python3`` (3.11), standard library only; the host passes this file's
text with ``-c`` and one JSON request on stdin: ``{"source": str, "input": any, "nonce": str}``.

Before the program runs, fds 0/1/2 are pointed at /dev/null (so its prints cannot reach, corrupt or
forge the report) and the report channel is a private duplicate of the original stdout. The program runs
as a fresh module named ``__candidate__`` with the request's ``input`` bound to the global ``INPUT``;
whatever it leaves in the global ``OUTPUT`` (JSON-serialisable) comes back. The report is one JSON line
``{"nonce", "ok", "error_type", "message", "output"}``; exiting early (``sys.exit``, ``os._exit``) or
being killed leaves no report, which the host counts as a failure.
"""

import json
import os
import sys

MAX_MESSAGE = 500


def _describe(exc):
    text = "%s: %s" % (type(exc).__name__, exc)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "..."


def main():
    request = json.loads(sys.stdin.buffer.read().decode("utf-8", "replace"))
    nonce = request.pop("nonce")
    source = request.pop("source")
    report_fd = os.dup(1)
    # Private references taken before the program runs, so patching modules cannot redirect the report.
    dumps, write, exit_now = json.dumps, os.write, os._exit
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115  # lives as long as the process
    namespace = {"__name__": "__candidate__", "__builtins__": __builtins__, "INPUT": request.get("input")}
    del request
    report = {"nonce": nonce, "ok": False, "error_type": None, "message": None, "output": None}
    try:
        code = compile(source, "<program>", "exec")
    except (SyntaxError, ValueError) as exc:
        report.update(error_type="syntax_error", message=_describe(exc))
    else:
        try:
            exec(code, namespace)
            report.update(ok=True, output=namespace.get("OUTPUT"))
        except MemoryError as exc:
            report.update(error_type="memory", message=_describe(exc))
        except BaseException as exc:  # SystemExit included: a program that exits early did not finish
            report.update(error_type="exception", message=_describe(exc))
    try:
        line = dumps(report, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        line = dumps({"nonce": nonce, "ok": False, "error_type": "exception", "message": _describe(exc)})
    data = (line + "\n").encode("utf-8", "replace")
    while data:
        data = data[write(report_fd, data) :]
    exit_now(0)  # skip atexit handlers and threads the program registered


if __name__ == "__main__":
    main()
