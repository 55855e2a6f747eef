"""Lets stock FedJAX 0.0.17 import and run on a current JAX (benchmark-only, never shipped).

FedJAX 0.0.17 calls ``jax.tree_map`` and friends, aliases JAX removed in 0.6 in favour of
``jax.tree.*``. With this directory (and FedJAX, dm-haiku, jmp and tabulate installed into it by
``benchmarks/peers/setup.sh fedjax-modern``) first on ``PYTHONPATH``, Python imports this module
at start-up and puts the aliases back; nothing else of FedJAX is changed.
"""

import jax

for _name, _function in (("tree_map", jax.tree.map), ("tree_leaves", jax.tree.leaves),
                         ("tree_flatten", jax.tree.flatten),
                         ("tree_unflatten", jax.tree.unflatten),
                         ("tree_structure", jax.tree.structure)):
    if not hasattr(jax, _name):
        setattr(jax, _name, _function)
