"""`noderoll demo`: a whole rollout on the local stack with simulated GPU nodes, watched live
(`command.py`; its processes, objects, live view, summary and `--gates` in the other modules)."""
