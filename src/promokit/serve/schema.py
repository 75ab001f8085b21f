"""What the decision service takes and answers: the request and answer models, and strict body parsing.

The models document the API in its OpenAPI schema, which says everything the service answers (a schemathesis
run in the tests holds the service to it). Bodies are parsed by :func:`parse_body`, not by FastAPI: numbers are
read as exact decimals and nothing is coerced, so money arrives exactly as the client wrote it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from promokit.campaign.money import MAX_MINOR

Key = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@/+=-]+$")]


class DecisionIn(BaseModel):
    """A decision request: exactly one of ``customer_id`` / ``merchant_id`` (both strings; null is refused)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "oneOf": [{"required": ["customer_id"], "not": {"required": ["merchant_id"]}},
                  {"required": ["merchant_id"], "not": {"required": ["customer_id"]}}]})
    request_id: Key = Field(description="Idempotency key: the same body again gets the first answer; another body "
                                        "with this key is a 409.")
    customer_id: Key = None
    merchant_id: Key = None

    @model_validator(mode="after")
    def _one_subject(self) -> DecisionIn:
        if (self.customer_id is None) == (self.merchant_id is None):
            raise ValueError("give exactly one of customer_id or merchant_id")
        return self


class DecisionOut(BaseModel):
    request_id: str
    population: Literal["customer", "merchant"]
    subject_id: str
    level: float | None = Field(description="Incentive value r_j issued, exact to the currency's minor unit; null "
                                            "for no incentive.")
    level_index: int | None
    expected_response: float
    expected_cost: float
    lam: float = Field(description="λ of the rule when the request was decided.")
    model_version: str
    reason: Literal["rule", "explore", "cap_reached", "cold_start"] = Field(
        description="rule: eq. 19/20; explore: a level drawn uniformly among the campaign's levels (the subject is "
                    "in the exploration bucket); cap_reached: the cap left no room for the rule's or the drawn "
                    "level; cold_start: an id the score table does not hold, answered as the campaign's cold_start "
                    "setting says.")
    cold_start: bool = Field(description="The id is not in the score table.")
    bucket: Literal["explore", "exploit"] = Field(
        description="The subject's exploration bucket: a keyed hash of its id, the same for every request of it.")
    propensity: float = Field(gt=0, le=1, description="Probability of this answer under the service's policy as it "
                                                      "stood: 1 for the rule's (or a fallback's) level, 1/K for a "
                                                      "level drawn among K, more when the cap merged draws.")
    expires_at: float
    replayed: bool = Field(description="True when this request was answered before (the stored answer).")


def _json_number(value):
    """Money is a JSON number (read exactly by :func:`parse_body`): a string or a boolean is refused."""
    if value is None or isinstance(value, Decimal):
        return value
    raise PydanticCustomError("number_type", "Input should be a JSON number (not a string or a boolean)")


class OutcomeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    request_id: Key
    redeemed: bool
    amount: Annotated[Decimal | None, BeforeValidator(_json_number),
                      WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]})] = Field(
        None, description="Money paid for the coupon, a JSON number with at most the currency's decimals; defaults "
                          "to its face value when redeemed.")


class OutcomeOut(BaseModel):
    request_id: str
    state: str
    redeemed: bool
    paid: float = Field(description="Money paid for this request, exact to the currency's minor unit.")
    replayed: bool


class SwitchIn(BaseModel):
    """Which version of the campaign directory to serve from now on."""

    model_config = ConfigDict(extra="forbid", strict=True)
    version: Key | None = Field(None, description="A version built in the campaign directory (its model_version); "
                                                  "absent or null: the newest built.")


class SwitchOut(BaseModel):
    switched: bool = Field(description="False when the version was live already at the answering worker (live.json "
                                        "points at it either way).")
    version: str = Field(description="The version served now.")
    previous: str = Field(description="The version served before.")
    time: float
    how: Literal["endpoint", "pointer", "signal"]
    seq: int = Field(description="The switch's number in live.json: the pointer with the highest is live.")


class Liveness(BaseModel):
    live: bool = Field(description="Always true: the worker's event loop answers (the ledger is not asked).")


class Readiness(BaseModel):
    ready: bool = Field(description="False while the ledger is down (answered 503).")
    ledger: Literal["up", "degraded", "down"] = Field(description="The ledger's state as the answering worker sees "
                                                                  "it.")


class Assignment(BaseModel):
    user_id: str
    fund: str


class Problem(BaseModel):
    detail: str


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationProblem(BaseModel):
    detail: list[FieldError]


class Invalid(Exception):
    """A request body that is not what the endpoint takes: answered 422 with one entry per field."""

    def __init__(self, errors: list[dict]):
        self.errors = errors


def parse_body(model: type[BaseModel], body: bytes) -> BaseModel:
    """Strict JSON → ``model``: numbers are read as exact decimals (so 0.1 is 0.1 and 1e400 is not ∞), NaN and
    ±Infinity (not JSON numbers) and repeated keys are refused, and no type is coerced (``"5"`` is not a number,
    ``"yes"`` not a boolean). Raises :class:`Invalid` naming each field."""
    try:
        data = _loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8 and a repeated key are ValueErrors
        raise Invalid([{"loc": ["body"], "msg": f"not a JSON object: {str(exc)[:200]}", "type": "json_invalid"}]) \
            from None
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        raise Invalid([field_error(error) for error in exc.errors(include_url=False, include_context=False)]) \
            from None


def _loads(body: bytes | str):
    """``json.loads(body, parse_float=Decimal, parse_int=Decimal, object_pairs_hook=_unique_keys)`` with one decoder
    made once (``json.loads`` with arguments makes a decoder per call)."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode(json.detect_encoding(body), "surrogatepass")
    elif body.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", body, 0)
    return _DECODER.decode(body)


def field_error(error: dict) -> dict:
    """A pydantic error as JSON can carry it: its input (NaN, a Decimal) is left out of the answer."""
    message = error["msg"]
    if isinstance(error.get("input"), float):  # only NaN and ±Infinity reach a field as floats
        message = f"{error['input']} is not a JSON number: {message}"
    return {"loc": ["body", *error["loc"]], "msg": message, "type": error["type"]}


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    data = dict(pairs)
    if len(data) != len(pairs):
        seen = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {repeated!r} is given twice")
    return data


_DECODER = json.JSONDecoder(parse_float=Decimal, parse_int=Decimal, object_pairs_hook=_unique_keys)


def responses(*statuses: int, described_as: dict[int, str] | None = None) -> dict:
    """OpenAPI entries for the error answers an endpoint gives (every one it can give: schemathesis checks);
    ``described_as`` replaces the descriptions of some statuses."""
    described = {401: "missing or wrong bearer token", 404: "unknown request_id", 409: "conflict with the ledger: "
                 "an idempotency key reused with another body, an expired coupon, a different outcome, a redemption "
                 "of no coupon, an amount above what the coupon can cost", 413: "request body above 16 KiB", 422: "a field is missing, of the wrong type or "
                 "out of range (one entry per field)", 503: "the ledger is unavailable", **(described_as or {})}
    return {status: {"description": described[status],
                     "model": ValidationProblem if status == 422 else Problem} for status in statuses}


def request_body(model: type[BaseModel], required: bool = True, **properties) -> dict:
    """The requestBody of an endpoint that parses its body itself (:func:`parse_body`), ``properties`` replaced."""
    schema = model.model_json_schema()
    schema["properties"].update(properties)
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def decision_body(populations) -> dict:
    """The requestBody of ``POST /v1/decisions`` for a campaign of these ``populations``: ``merchant_id`` is offered
    only by a campaign with merchants (one without refuses it), where :class:`DecisionIn` takes either."""
    extra = request_body(DecisionIn)
    if "merchant" not in populations:
        schema = extra["requestBody"]["content"]["application/json"]["schema"]
        del schema["oneOf"], schema["properties"]["merchant_id"], schema["properties"]["customer_id"]["default"]
        schema["required"].append("customer_id")
        schema["description"] = "A decision request (this campaign has customers only): a string customer_id."
    return extra


def amount_schema(exponent: int) -> dict:
    """The outcome's ``amount`` as this campaign takes it: a number ≥ 0 in whole minor units below MAX_MINOR."""
    number = {"type": "number", "minimum": 0, "maximum": (MAX_MINOR - 1) / 10**exponent,
              "multipleOf": 1 if exponent == 0 else float(f"1e-{exponent}")}
    return {"anyOf": [number, {"type": "null"}], "description": OutcomeIn.model_fields["amount"].description}
