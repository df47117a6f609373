"""What every section of a config file is built of: the strict base (frozen, unknown
keys refused) and the types of names (SQL identifiers, Kafka topic names)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


Identifier = Annotated[str, Field(pattern=_IDENTIFIER.pattern)]


TopicName = Annotated[str, Field(pattern=_TOPIC.pattern)]


class Section(BaseModel):
    """Base of every config section: frozen, unknown keys refused."""

    # coerce_numbers_to_str: an environment override TOPIC=123 is the string "123".
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)
