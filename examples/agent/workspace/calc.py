"""A small calculator with a bug for the demo agent to fix."""


def add(a, b):
    return a - b


def mul(a, b):
    return a * b
