"""The experiment as RLlib sees it: the AlgorithmConfig build, env registration, multi-agent
mapping, RLModules and RLlib callbacks."""
