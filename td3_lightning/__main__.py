"""``python -m td3_lightning`` runs the command line."""

from td3_lightning.cli import main

if __name__ == "__main__":
    main()
