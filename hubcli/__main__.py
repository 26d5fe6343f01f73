"""`python -m hubcli ...` is `hub ...`: what `torchrun --nproc-per-node N -m hubcli train ...`
starts in every process."""

from hubcli.cli.main import main

main()
