"""The online migration gateway: a Kafka proxy that coordinates the groups it manages itself.

    from compat.gateway import Gateway
    gateway = Gateway(("broker", 9092), ("127.0.0.1", 19092))
    await gateway.start()
"""

from compat.gateway.proxy import Gateway

__all__ = ["Gateway"]
