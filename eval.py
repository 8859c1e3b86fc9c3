"""Evaluate a robot policy in simulation: `python eval.py [env=…] [policy=…] [key=value …]`."""

from lerobot_hydra.app.main import main

if __name__ == "__main__":
    main()
