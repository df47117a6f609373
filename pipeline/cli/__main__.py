"""``python -m pipeline.cli``, and the driver program ``spark-submit`` runs as a script
(``floodgate driver-path`` prints this file's path)."""

from pipeline.cli import main

main()
