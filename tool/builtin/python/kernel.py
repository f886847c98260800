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


def _above_std(fd):
    """Returns a copy of fd numbered above 2 (closing fd): a pipe made
    while fd 1 or 2 is closed would otherwise take its number."""
    held = []
    while fd <= 2:
        held.append(fd)
        fd = os.dup(fd)
    for h in held:
        os.close(h)
    return fd


def _redirect(fd, name):
    r, w = os.pipe()
    r, w = _above_std(r), _above_std(w)
    os.dup2(w, fd)
    os.close(w)
    p = _Pump(name, r)
    p.ident_fd = _ident(fd)
    p.start()
    return p


def _ident(fd):
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _stream(fd):
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)


_pumps = [_redirect(1, "out"), _redirect(2, "err")]
sys.stdout, sys.stderr = _stream(1), _stream(2)
sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
# The kernel's own stream objects: a cell that assigns another object to
# sys.stdout (open('/dev/null', 'w'), io.StringIO()) and leaves it there
# gets ours back after the cell, with a note.
_own = {"stdout": sys.stdout, "stderr": sys.stderr}


def _repair():
    """Reconnects fd 1 and 2 and sys.stdout/stderr when a cell closed or
    replaced them (os.close(1), sys.stdout.close()): later cells' output
    must still reach Keel. Returns the names of the channels repaired."""
    fixed = []
    for i, (fd, name) in enumerate(((1, "out"), (2, "err"))):
        if _ident(fd) != _pumps[i].ident_fd:
            _pumps[i] = _redirect(fd, name)
            fixed.append(name)
    for attr, fd, name in (("stdout", 1, "out"), ("stderr", 2, "err")):
        f = getattr(sys, attr)
        if name in fixed or getattr(f, "closed", True) or getattr(_own[attr], "closed", True):
            f = _stream(fd)
            _own[attr] = f
            setattr(sys, attr, f)
            setattr(sys, "__%s__" % attr, f)
            if name not in fixed:
                fixed.append(name)
        elif f is not _own[attr]:
            setattr(sys, attr, _own[attr])
            setattr(sys, "__%s__" % attr, _own[attr])
            fixed.append(name)
    return fixed

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
        fixed = _repair()
        try:
            _sync()
        except KernelTimeout:
            pass
        if fixed:
            # The note goes after the cell's own output.
            _send({"t": "err", "id": cell_id, "d": "[keel: the cell closed or replaced the kernel's %s; Keel reconnected it for the next cells]\n" % " and ".join({"out": "stdout", "err": "stderr"}[n] for n in fixed)})
        _send(res)


main()
