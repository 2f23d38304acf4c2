# mprun.py: run the named test functions of one shared test module under MicroPython, one line each.
# Usage: micropython -X heapsize=N mprun.py MODULE NAME [NAME ...]; output lines start with "@@".
import gc
import sys
import time

import testkit


def _fmt_exc(e):
    try:
        import io

        buf = io.StringIO()
        sys.print_exception(e, buf)
        return buf.getvalue()
    except Exception:
        return repr(e)


def main(argv):
    modname = argv[1]
    mod = __import__(modname)
    for name in argv[2:]:
        fn = getattr(mod, name, None)
        if fn is None:
            print("@@FAIL", name)
            print("|no such test function under MicroPython")
            continue
        gc.collect()
        t0 = time.ticks_ms()
        try:
            fn()
        except testkit.SkipTest as e:
            print("@@SKIP", name)
            print("|" + str(e))
            continue
        except BaseException as e:  # noqa: B036 - report everything, including MemoryError
            print("@@FAIL", name)
            for line in _fmt_exc(e).split("\n"):
                print("|" + line)
            continue
        print("@@PASS", name, time.ticks_diff(time.ticks_ms(), t0))
    print("@@END")


main(sys.argv)
