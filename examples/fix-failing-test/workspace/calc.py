"""A tiny module with a bug for the debug agent to find: add subtracts."""


def add(a: int, b: int) -> int:
    return a - b
