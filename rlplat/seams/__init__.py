"""Every touch of a private name of Ray, RLlib or Tune, in one package."""
