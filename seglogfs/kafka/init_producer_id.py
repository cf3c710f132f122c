"""InitProducerId for idempotent producers (a transactional id is refused: transactions are not
served). Producer ids come from the clock (milliseconds x 1024 + a counter), so they stay unique
across restarts without a file; each starts at epoch 0."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from .messages import make, response_class

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["init_producer_id"]


def init_producer_id(broker: BrokerState, request: Any, version: int) -> Any:
    """A new producer id at epoch 0, or an error for a transactional producer."""
    cls = response_class(22, version)
    if request.transactional_id is not None:
        refused = ErrorCode.transactional_id_authorization_failed  # transactions are not served
        return make(cls, throttle_time=timedelta(0), error_code=refused, producer_id=-1, producer_epoch=-1)
    if broker.read_only:
        return make(cls, throttle_time=timedelta(0), error_code=ErrorCode.cluster_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    return make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none,
                producer_id=broker.producer_ids.next(), producer_epoch=0)
