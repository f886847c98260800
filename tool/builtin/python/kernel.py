# Keel's Python kernel: one persistent interpreter per run, inside the
# sandbox. The host writes one JSON request per line on stdin:
#   {"id": N, "code": "...", "timeout": SECONDS}
# and reads JSON frames, one per line, on the original stdout:
#   {"t": "ready", "version": "3.11.2"}
#   {"t": "out" | "err", "id": N, "d": "..."}   (bytes as latin-1)
#   {"t": "done", "id": N, "status": "ok" | "syntax_error" | "error" | "timeout",
#    "ename": "...", "evalue": "...", "traceback": "...", "duration": SECONDS}
# The cell's stdout and stderr (file descriptors 1 and 2, so subprocesses
# are captured too) are pipes read by two threads; after each cell a
# sentinel written to both marks the end of its output.
import ast, json, linecache, os, signal, sys, threading, time, traceback

_proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
_requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
sys.stdin = open(os.devnull, "r")

_lock = threading.Lock()
_current = [0]


def _send(obj):
    line = json.dumps(obj) + "\n"
    with _lock:
        _proto.write(line)
        _proto.flush()


class KernelTimeout(BaseException):
    """Raised in the cell when its time limit passes."""


def _alarm(signum, frame):
    raise KernelTimeout()


signal.signal(signal.SIGALRM, _alarm)

_SENTINEL = b"\x00KEEL-CELL-END-" + os.urandom(8).hex().encode() + b"\x00"


class _Pump(threading.Thread):
    def __init__(self, name, fd):
        super().__init__(daemon=True)
        self.tag = name
        self.fd = fd
        self.synced = threading.Event()

    def run(self):
        buf = b""
        while True:
            try:
                data = os.read(self.fd, 16384)
            except OSError:
                return
            if not data:
                return
            buf += data
            while True:
                i = buf.find(_SENTINEL)
                if i < 0:
                    break
                self._forward(buf[:i])
                buf = buf[i + len(_SENTINEL):]
                self.synced.set()
            keep = 0
            for k in range(min(len(_SENTINEL) - 1, len(buf)), 0, -1):
                if _SENTINEL.startswith(buf[-k:]):
                    keep = k
                    break
            self._forward(buf[: len(buf) - keep])
            buf = buf[len(buf) - keep:]

    def _forward(self, data):
        if data:
            _send({"t": self.tag, "id": _current[0], "d": data.decode("latin-1")})


def _redirect(fd, name):
    r, w = os.pipe()
    os.dup2(w, fd)
    os.close(w)
    p = _Pump(name, r)
    p.start()
    return p


_pumps = [_redirect(1, "out"), _redirect(2, "err")]
sys.stdout = os.fdopen(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
sys.stderr = os.fdopen(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr

_globals = {"__name__": "__main__", "__builtins__": __builtins__}


def _sync():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    for p in _pumps:
        p.synced.clear()
    for fd in (1, 2):
        try:
            os.write(fd, _SENTINEL)
        except OSError:
            pass
    for p in _pumps:
        p.synced.wait(10)


_KFILE = sys._getframe().f_code.co_filename


def _user_tb(tb):
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
        tb = tb.tb_next
    return tb


def _user_frames(tb):
    return [f for f in traceback.extract_tb(_user_tb(tb)) if f.filename != _KFILE]


def _run(cell_id, code, timeout):
    name = "<cell %d>" % cell_id
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    result = {"t": "done", "id": cell_id, "status": "ok"}
    start = time.monotonic()
    try:
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, name, "exec")
        tail = compile(last, name, "eval") if last is not None else None
    except (SyntaxError, ValueError) as e:
        result.update(status="syntax_error", ename=type(e).__name__, evalue=str(e),
                      traceback="".join(traceback.format_exception_only(type(e), e)))
        result["duration"] = time.monotonic() - start
        return result
    try:
        if timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(body, _globals)
            if tail is not None:
                value = eval(tail, _globals)
                if value is not None:
                    print(repr(value))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KernelTimeout:
        result.update(status="timeout", ename="TimeoutError", evalue="the cell ran longer than %gs and was interrupted" % timeout,
                      traceback="".join(traceback.format_list(_user_frames(sys.exc_info()[2]))))
    except BaseException as e:
        result.update(status="error", ename=type(e).__name__, evalue=str(e),
                      traceback="".join(traceback.format_exception(type(e), e, _user_tb(e.__traceback__))))
    result["duration"] = time.monotonic() - start
    return result


def main():
    _send({"t": "ready", "version": sys.version.split()[0], "pid": os.getpid()})
    for line in _requests:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        cell_id = int(req.get("id", 0))
        _current[0] = cell_id
        res = _run(cell_id, req.get("code", ""), float(req.get("timeout", 0)))
        try:
            _sync()
        except KernelTimeout:
            pass
        _send(res)


main()
