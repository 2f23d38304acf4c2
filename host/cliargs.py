"""cliargs.py: the argument checks and option groups that more than one `edgetwin` command shares.

Each host/cmd_NAME.py is one command and imports no other (tests/host/test_cliargs.py): what two of them
need (a writable output path, a readable log store, a loadable target model, the question box's options)
lives here once. Each check raises UserError with the one line the user sees.
"""

from __future__ import annotations

import os
from pathlib import Path

from host.errors import UserError


def check_out_path(opt: str, path: Path) -> None:
    """A file the gateway writes: an existing file, or a new one in an existing directory (none is created)."""
    if path.exists() and not path.is_file():
        raise UserError("%s %s: not a file" % (opt, path))
    if not path.parent.is_dir():
        raise UserError("%s %s: directory %s does not exist (create it first)" % (opt, path, path.parent))
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise UserError("%s %s: not writable" % (opt, path))


def check_store(db: Path) -> None:
    """UserError unless `db` is a readable log store (what --db of `ask` and `edgetwin ui` must name)."""
    if db.is_dir():
        raise UserError("--db %s is a directory, not a log store (give the gateway's --db file)" % db)
    if not db.is_file():
        raise UserError("log store %s does not exist (give the gateway's --db file)" % db)
    if not os.access(db, os.R_OK):
        raise UserError("--db %s: not readable (permission denied)" % db)
    from host.store import LogStore, StoreError

    try:  # a file that is not a log store is refused here, not by a traceback later
        LogStore(db, readonly=True).close()
    except StoreError as e:
        raise UserError(str(e)) from None


def check_target(opt: str, target: str) -> None:
    """The target choice `ask` will load (host/target_delta.choose, its one rule), checked before the server
    starts: a missing file or model is the operator's one line now, not an error in the question box later."""
    from host import target_delta

    try:
        target_delta.choose(target)
    except OSError as e:  # ModelNotInstalled is a FileNotFoundError
        raise UserError("%s %s: %s" % (opt, target, e)) from None


def add_ask_arguments(g, opt: str = "--") -> None:
    """The question box's models (`edgetwin ask`'s --target and --reranker), for `ui` and `gateway --ui`."""
    g.add_argument(opt + "target", default="domain", metavar="TARGET",
                   help="the model that answers questions: domain (default), stock or a GGUF file (as `edgetwin ask`)")
    g.add_argument(opt + "reranker", default=None, metavar="DIR",
                   help="the reranker directory (default: the shipped one)")
