"""``python -m td3_lightning`` and the ``td3-lightning`` script: every subcommand.

The listing, an unknown subcommand and ``<subcommand> --help`` are answered before torch or Lightning is
imported (:func:`td3_lightning.commands.answer_early`). ``tune`` runs many fits through
:mod:`td3_lightning.cli`, so it is dispatched here, above the command line it drives; ``export`` has its own
small parser; ``fit``, ``validate`` and ``test`` are :func:`td3_lightning.cli.main`.
"""

from __future__ import annotations

import sys


def main(args: list[str] | None = None) -> None:
    try:
        _main(args)
    except KeyboardInterrupt:  # Ctrl-C before a fit's own stop notice can take it (torch and Lightning loading)
        print("stopped by SIGINT (Ctrl-C)", file=sys.stderr)
        sys.exit(130)


def _main(args: list[str] | None) -> None:
    from td3_lightning.commands import answer_early  # the listing, an unknown subcommand, --help: no torch import

    argv = sys.argv[1:] if args is None else list(args)
    answer_early(argv)  # cli.main calls it again, for callers that start there
    if argv[:1] == ["tune"]:
        from td3_lightning.errors import warning_lines
        from td3_lightning.tune import main as tune_main

        with warning_lines():
            tune_main(argv[1:])
        return
    if argv[:1] == ["export"]:  # its own small parser: Lightning is imported only to read a checkpoint
        from td3_lightning.export import main as export_main

        export_main(argv[1:])
        return
    from td3_lightning.cli import main as cli_main

    cli_main(argv)


if __name__ == "__main__":
    main()
