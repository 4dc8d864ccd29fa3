"""Code both served wheels ship (the agent's and the CLI's, scheduler/wheels.py) and the server
imports: one statement of a rule that a GPU host, a laptop and the server all apply."""
