"""``gpuplan validate microbench``: leave-one-device-out on the published microbenchmarks."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuplan.cli._common import FORMAT_OPTION, Format, emit, text_file_option

HELP = """Predict each published device from the others and compare with its published value.

Every measurement of one device class is removed, the calibration is refitted on the rest
and the device is predicted by transfer, as an unmeasured catalog device would be: the
best dense bf16 matmul of each NVIDIA data-centre GPU (target 10%) and the 8-GPU
intra-node all-reduce bus bandwidth at 1 GiB (target 15%); the predicted interval should
contain the published value in 80% of cases.

\b
Examples:
  gpuplan validate microbench
  gpuplan validate microbench --format json | jq .summary
  gpuplan validate microbench --data my_microbench.csv    same columns as the shipped table
"""


def register(app: typer.Typer) -> None:
    """Add ``microbench`` to ``gpuplan validate``."""

    @app.command("microbench", help=HELP)
    def microbench(
        data: Path = text_file_option(
            None, "--data", help="published table (CSV, columns of the shipped microbench.csv)"
        ),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        from gpuplan.calibration.reference import build_reference_documents, read_microbench
        from gpuplan.calibration.validation import leave_one_device_out
        from gpuplan.catalogs import get_catalog
        from gpuplan.cli.calibrate import print_loo
        from gpuplan.errors import InputError
        from gpuplan.results.store import parse_result

        catalog = get_catalog()
        docs = None
        if data is not None:
            try:
                rows = read_microbench(data)
            except (KeyError, UnicodeDecodeError) as exc:
                raise InputError(
                    f"{data}: not a microbenchmark table ({exc})",
                    hint="use the columns of gpuplan/calibration/data/microbench.csv",
                ) from None
            try:
                built, _, _ = build_reference_documents(rows, catalog=catalog)
            except KeyError as exc:
                raise InputError(
                    f"{data}: missing column {exc}",
                    hint="use the columns of gpuplan/calibration/data/microbench.csv",
                ) from None
            docs = [parse_result(d, where=str(data)) for d in built]
        result = leave_one_device_out(docs, catalog=catalog)
        emit(result, fmt, lambda console: print_loo(console, result))
