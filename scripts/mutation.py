"""What the mutation sweeps share (scripts/*-mutate.py): walking a JSON
document's leaves, reaching one by its path, and the values a number is
changed to."""


def leaves(node, want=lambda value: True, path=()):
    """(path, value) of every leaf under `node` that `want(value)` takes."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, want, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaves(value, want, path + (index,))
    elif want(node):
        yield path, node


def at(node, path):
    """The value at `path` (keys and indices) under `node`."""
    for key in path:
        node = node[key]
    return node


def show(path):
    return "/".join(map(str, path)) or "(root)"


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def new_number(rng, value, more_floats=()):
    """Another value for the number `value`: 0, -1, +-1, twice, a huge one,
    a random one in range (a float: 0, -1, twice, half, 1e30, its negation,
    and `more_floats`)."""
    if isinstance(value, int):
        new = rng.choice([0, -1, value + 1, value - 1, value * 2, 1 << 40,
                          rng.randrange(0, 2 * abs(value) + 2)])
    else:
        new = rng.choice([0.0, -1.0, value * 2, value / 2, 1e30, -value] +
                         list(more_floats))
    return new if new != value else value + 1
