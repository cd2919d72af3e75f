"""``python -m gpuplan`` is the same as the ``gpuplan`` command."""

from gpuplan.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
