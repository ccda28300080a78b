"""The tuner's version: stored with every measurement and every bundle."""

TUNER_VERSION = "0.1.0"
