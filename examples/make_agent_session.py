"""Write examples/agent_session.jsonl: a made-up Claude Code session long enough to need compacting.

    python examples/make_agent_session.py [OUTPUT]

A coding agent fixes issue #482 of a small FastAPI shop service (/home/dev/shop-api): checkout
answers 500 for carts with a coupon that has an expiry date. On the way the user changes direction
(answer 422 COUPON_EXPIRED instead of dropping an expired coupon), asks in Chinese for a Chinese
error message, and passes on a code review; the agent reads files, runs pytest, greps, edits,
starts the dev server on localhost:8081 and finishes with a summary. The content is written for
ctxkeep; no line of it comes from a real session.

Sized for the README: about 75,000 tokens (a 100 KB server log among them), 175 messages, under
700 KB, so that ``ctxkeep compact examples/agent_session.jsonl --window 32000`` compacts three
times. After changing the story, run that command again and check the count.

The repository the agent works on is kept in memory, so every Read shows the file as the earlier
Edits left it, and the final ``git diff`` is the real difference. The output is the same on every
run: a fixed seed, a fixed clock, the standard library only.
"""

from __future__ import annotations

import base64
import difflib
import fnmatch
import hashlib
import json
import random
import re
import sys
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = "/home/dev/shop-api"
SESSION_ID = "c0ffee42-8d1e-4b7a-9f3c-2a6e5d4b1c80"
VERSION = "2.1.20"
BRANCH = "fix/482-expired-coupon"
MODEL = "claude-sonnet-4-5-20250929"
START = datetime(2026, 3, 14, 9, 2, 11, 318000, tzinfo=UTC)
SENTRY_EVENT = "3b9f2c1e-7a4d-4e8b-9c21-5f0d6a8e1b47"
ISSUE_URL = "https://git.shopworks.example/shop/shop-api/-/issues/482"
SENTRY_URL = (
    "https://sentry.shopworks.example/organizations/shopworks/issues/90117/events/3b9f2c1e7a4d4e8b9c215f0d6a8e1b47/"
)
OUTPUT = Path(__file__).with_name("agent_session.jsonl")


# --- the repository, as it is when the session starts ------------------------------------------

FILES: dict[str, str] = {}

FILES["app/timeutil.py"] = r'''"""Clock helpers. Everything in shop-api works in UTC."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(timezone.utc)


def isoformat_z(value: datetime) -> str:
    """`value` as ISO 8601 with a trailing Z (naive values are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
'''

FILES["app/models/coupon.py"] = r'''"""Coupons: a code that takes a percentage or a fixed amount off a cart."""

from __future__ import annotations

import enum
from datetime import datetime
from decimal import Decimal

from sqlalchemy import DateTime, Enum, Integer, Numeric, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base


class CouponKind(str, enum.Enum):
    PERCENT = "percent"
    FIXED = "fixed"


class Coupon(Base):
    __tablename__ = "coupons"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    kind: Mapped[CouponKind] = mapped_column(Enum(CouponKind, native_enum=False))
    value: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    min_subtotal: Mapped[Decimal] = mapped_column(Numeric(10, 2), default=Decimal("0"))
    # stored without a zone since migration 0007 (SQLite has no timezone type); the values are UTC
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=False), nullable=True)
    max_uses: Mapped[int | None] = mapped_column(Integer, nullable=True)
    used_count: Mapped[int] = mapped_column(Integer, default=0)

    def __repr__(self) -> str:
        return f"<Coupon {self.code} {self.kind.value} {self.value}>"
'''

FILES["app/services/discounts.py"] = r'''"""Which coupons apply to a cart, and how much they take off."""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models.coupon import Coupon, CouponKind
from app.timeutil import utcnow

CENT = Decimal("0.01")


def find_coupon(db: Session, code: str) -> Coupon | None:
    """The coupon with this code (case-insensitive), or None."""
    normalized = code.strip().upper()
    return db.scalars(select(Coupon).where(Coupon.code == normalized)).first()


def coupon_is_active(coupon: Coupon, now: datetime | None = None) -> bool:
    """False once the coupon has expired or been used up."""
    now = now or utcnow()
    if coupon.expires_at is not None and coupon.expires_at <= now:
        return False
    if coupon.max_uses is not None and coupon.used_count >= coupon.max_uses:
        return False
    return True


def discount_for(coupon: Coupon, subtotal: Decimal) -> Decimal:
    """What the coupon takes off `subtotal`: never more than the subtotal, rounded to the cent."""
    if subtotal < coupon.min_subtotal:
        return Decimal("0.00")
    if coupon.kind is CouponKind.PERCENT:
        amount = subtotal * coupon.value / Decimal(100)
    else:
        amount = coupon.value
    return min(amount, subtotal).quantize(CENT, rounding=ROUND_HALF_UP)
'''

FILES["app/services/pricing.py"] = r'''"""Pricing a cart: subtotal, coupon discount, shipping and tax, as one Quote."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy.orm import Session

from app.models.cart import Cart
from app.services import shipping, tax
from app.services.discounts import CENT, coupon_is_active, discount_for, find_coupon

log = logging.getLogger("shop.pricing")


@dataclass(frozen=True)
class Quote:
    subtotal: Decimal
    discount: Decimal
    shipping: Decimal
    tax: Decimal
    total: Decimal
    coupon_code: str | None
    currency: str = "EUR"


def price_cart(db: Session, cart: Cart, coupon_code: str | None = None) -> Quote:
    """The quote for `cart`; an unknown or inactive coupon is left out (and logged)."""
    subtotal = sum((line.unit_price * line.quantity for line in cart.lines), Decimal("0.00"))
    discount = Decimal("0.00")
    applied: str | None = None
    if coupon_code:
        coupon = find_coupon(db, coupon_code)
        if coupon is None:
            log.info("cart %s: unknown coupon %r", cart.id, coupon_code)
        elif not coupon_is_active(coupon):
            log.info("cart %s: coupon %s is no longer active", cart.id, coupon.code)
        else:
            discount = discount_for(coupon, subtotal)
            applied = coupon.code
    ship = shipping.cost_for(cart, subtotal - discount)
    vat = tax.vat_for(cart.country, subtotal - discount + ship)
    total = (subtotal - discount + ship + vat).quantize(CENT)
    return Quote(subtotal=subtotal, discount=discount, shipping=ship, tax=vat, total=total, coupon_code=applied)
'''

FILES["app/routers/checkout.py"] = r'''"""Checkout: price a cart, then turn it into an order."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header
from sqlalchemy.orm import Session

from app.db import get_db
from app.errors import NotFound
from app.models.cart import Cart
from app.schemas.checkout import CheckoutRequest, OrderOut, QuoteOut
from app.services import orders
from app.services.pricing import price_cart

router = APIRouter(prefix="/checkout", tags=["checkout"])


def _cart(db: Session, cart_id: str) -> Cart:
    cart = db.get(Cart, cart_id)
    if cart is None or cart.closed:
        raise NotFound("errors.cart_not_found", cart_id=cart_id)
    return cart


@router.post("/quote", response_model=QuoteOut)
def quote(body: CheckoutRequest, db: Session = Depends(get_db)) -> QuoteOut:
    cart = _cart(db, body.cart_id)
    return QuoteOut.from_quote(price_cart(db, cart, body.coupon_code))


@router.post("", response_model=OrderOut, status_code=201)
def checkout(
    body: CheckoutRequest,
    db: Session = Depends(get_db),
    idempotency_key: str | None = Header(default=None, alias="Idempotency-Key"),
) -> OrderOut:
    cart = _cart(db, body.cart_id)
    q = price_cart(db, cart, body.coupon_code)
    order = orders.place(db, cart, q, idempotency_key=idempotency_key)
    return OrderOut.from_order(order)
'''

FILES["app/routers/cart.py"] = r'''"""Carts: create, add and remove lines, and a priced summary for the basket page."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from app.db import get_db
from app.errors import NotFound, OutOfStock
from app.models.cart import Cart, CartLine
from app.models.product import Product
from app.schemas.cart import AddLine, CartOut, CartSummaryOut
from app.services.pricing import price_cart

router = APIRouter(prefix="/carts", tags=["cart"])


def _open_cart(db: Session, cart_id: str) -> Cart:
    cart = db.get(Cart, cart_id)
    if cart is None or cart.closed:
        raise NotFound("errors.cart_not_found", cart_id=cart_id)
    return cart


@router.post("", response_model=CartOut, status_code=201)
def create_cart(db: Session = Depends(get_db), country: str = Query("DE", min_length=2, max_length=2)) -> CartOut:
    cart = Cart(country=country.upper())
    db.add(cart)
    db.commit()
    return CartOut.from_cart(cart)


@router.post("/{cart_id}/lines", response_model=CartOut)
def add_line(cart_id: str, body: AddLine, db: Session = Depends(get_db)) -> CartOut:
    cart = _open_cart(db, cart_id)
    product = db.get(Product, body.sku)
    if product is None:
        raise NotFound("errors.product_not_found", sku=body.sku)
    if product.stock < body.quantity:
        raise OutOfStock("errors.out_of_stock", sku=body.sku, available=product.stock)
    cart.lines.append(CartLine(sku=product.sku, unit_price=product.price, quantity=body.quantity))
    db.commit()
    return CartOut.from_cart(cart)


@router.delete("/{cart_id}/lines/{sku}", response_model=CartOut)
def remove_line(cart_id: str, sku: str, db: Session = Depends(get_db)) -> CartOut:
    cart = _open_cart(db, cart_id)
    cart.lines = [line for line in cart.lines if line.sku != sku]
    db.commit()
    return CartOut.from_cart(cart)


@router.get("/{cart_id}/summary", response_model=CartSummaryOut)
def summary(cart_id: str, coupon: str | None = None, db: Session = Depends(get_db)) -> CartSummaryOut:
    """What the basket page shows: lines and a quote. A coupon that does not apply is just not shown."""
    cart = _open_cart(db, cart_id)
    return CartSummaryOut.from_cart(cart, price_cart(db, cart, coupon))
'''

FILES["app/errors.py"] = r'''"""Errors the API returns on purpose, and the handlers that turn them into JSON."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.i18n import pick_locale, translate

log = logging.getLogger("shop.errors")


class ShopError(Exception):
    """An error with an HTTP status, a stable code for clients, and a message key."""

    status_code = 400
    code = "BAD_REQUEST"

    def __init__(self, key: str, **params: Any) -> None:
        super().__init__(key)
        self.key = key
        self.params = params


class NotFound(ShopError):
    status_code = 404
    code = "NOT_FOUND"


class OutOfStock(ShopError):
    status_code = 409
    code = "OUT_OF_STOCK"


class InvalidCoupon(ShopError):
    status_code = 422
    code = "COUPON_INVALID"


def _body(request: Request, exc: ShopError) -> dict[str, Any]:
    locale = pick_locale(request.headers.get("accept-language"))
    return {
        "error": {
            "code": exc.code,
            "message": translate(exc.key, locale, **exc.params),
            "request_id": getattr(request.state, "request_id", None),
        }
    }


def register_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ShopError)
    async def _shop_error(request: Request, exc: ShopError) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content=_body(request, exc))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        body = {
            "error": {
                "code": "INTERNAL",
                "message": "Internal server error",
                "request_id": getattr(request.state, "request_id", None),
            }
        }
        return JSONResponse(status_code=500, content=body)
'''

FILES[
    "app/i18n/__init__.py"
] = r'''"""Message catalogues (app/i18n/<locale>.json) and picking a locale from Accept-Language."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
DEFAULT = "en"
SUPPORTED = ("en", "de", "zh_CN")


@cache
def catalogue(locale: str) -> dict[str, str]:
    return json.loads((HERE / f"{locale}.json").read_text(encoding="utf-8"))


def pick_locale(accept_language: str | None) -> str:
    """The first supported locale in an Accept-Language header (zh, zh-CN, zh-Hans all mean zh_CN)."""
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().replace("-", "_")
        if tag.lower().startswith("zh"):
            return "zh_CN"
        if tag[:2].lower() in SUPPORTED:
            return tag[:2].lower()
    return DEFAULT


def translate(key: str, locale: str = DEFAULT, **params: Any) -> str:
    """The message for `key` in `locale`, falling back to English, with `params` filled in."""
    text = catalogue(locale).get(key) or catalogue(DEFAULT).get(key) or key
    return text.format(**params)
'''

FILES["app/main.py"] = r'''"""shop-api: the application factory."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from app.config import Settings, get_settings
from app.db import init_engine
from app.errors import register_error_handlers
from app.middleware import RequestIdMiddleware
from app.routers import cart, catalog, checkout, health, orders

log = logging.getLogger("shop.main")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="shop-api", version="2.14.0", docs_url="/docs" if settings.debug else None)
    init_engine(settings.database_url)
    app.add_middleware(RequestIdMiddleware)
    register_error_handlers(app)
    for router in (health.router, catalog.router, cart.router, checkout.router, orders.router):
        app.include_router(router, prefix="/api/v1")
    log.info("shop-api ready (env=%s)", settings.env)
    return app


app = create_app()
'''

FILES[
    "app/config.py"
] = r'''"""Settings from the environment (prefix SHOP_), with the defaults a developer machine needs."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOP_", env_file=".env", extra="ignore")

    env: str = "dev"
    debug: bool = True
    host: str = "127.0.0.1"
    port: int = 8081
    database_url: str = "sqlite:///./var/shop.db"
    default_locale: str = "en"
    sentry_dsn: str | None = None
    free_shipping_from: str = "49.00"


@lru_cache
def get_settings() -> Settings:
    return Settings()
'''

FILES["app/schemas/checkout.py"] = r'''"""Request and response bodies of /checkout."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, Field

from app.models.order import Order
from app.services.pricing import Quote


class CheckoutRequest(BaseModel):
    cart_id: str = Field(min_length=8, max_length=40)
    coupon_code: str | None = Field(default=None, max_length=32)


class QuoteOut(BaseModel):
    subtotal: Decimal
    discount: Decimal
    shipping: Decimal
    tax: Decimal
    total: Decimal
    currency: str
    coupon_code: str | None

    @classmethod
    def from_quote(cls, q: Quote) -> QuoteOut:
        return cls(
            subtotal=q.subtotal,
            discount=q.discount,
            shipping=q.shipping,
            tax=q.tax,
            total=q.total,
            currency=q.currency,
            coupon_code=q.coupon_code,
        )


class OrderOut(BaseModel):
    id: str
    status: str
    total: Decimal
    currency: str

    @classmethod
    def from_order(cls, order: Order) -> OrderOut:
        return cls(id=order.id, status=order.status.value, total=order.total, currency=order.currency)
'''

FILES["tests/conftest.py"] = r'''from __future__ import annotations

from decimal import Decimal

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from app.config import Settings
from app.db import Base, get_db
from app.main import create_app
from app.models.cart import Cart, CartLine
from app.models.product import Product


@pytest.fixture
def engine(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'test.db'}")
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def db(engine):
    session = sessionmaker(bind=engine, expire_on_commit=False)()
    yield session
    session.close()


@pytest.fixture
def client(db):
    app = create_app(Settings(database_url="sqlite://", debug=False))
    app.dependency_overrides[get_db] = lambda: db
    with TestClient(app) as c:
        yield c


@pytest.fixture
def products(db):
    items = [
        Product(sku="MUG-001", name="Enamel mug", price=Decimal("12.50"), stock=40),
        Product(sku="TEA-014", name="Sencha 100 g", price=Decimal("8.50"), stock=120),
        Product(sku="KTL-220", name="Gooseneck kettle", price=Decimal("64.00"), stock=3),
    ]
    db.add_all(items)
    db.commit()
    return items


@pytest.fixture
def cart(db, products):
    """A German cart worth 42.00: two mugs and two packs of tea."""
    c = Cart(id="cart-7f2e91ab", country="DE")
    c.lines = [
        CartLine(sku="MUG-001", unit_price=Decimal("12.50"), quantity=2),
        CartLine(sku="TEA-014", unit_price=Decimal("8.50"), quantity=2),
    ]
    db.add(c)
    db.commit()
    return c
'''

FILES["tests/test_discounts.py"] = r"""from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from app.models.coupon import Coupon, CouponKind
from app.services.discounts import coupon_is_active, discount_for

NOW = datetime(2026, 3, 1, 12, 0)


def make(**kw):
    base = dict(
        code="SPRING15",
        kind=CouponKind.PERCENT,
        value=Decimal("15"),
        min_subtotal=Decimal("0"),
        expires_at=None,
        max_uses=None,
        used_count=0,
    )
    base.update(kw)
    return Coupon(**base)


def test_coupon_without_expiry_is_active():
    assert coupon_is_active(make(), now=NOW)


def test_expired_coupon_is_inactive():
    assert not coupon_is_active(make(expires_at=NOW - timedelta(seconds=1)), now=NOW)


def test_coupon_expiring_later_is_active():
    assert coupon_is_active(make(expires_at=NOW + timedelta(days=2)), now=NOW)


def test_used_up_coupon_is_inactive():
    assert not coupon_is_active(make(max_uses=3, used_count=3), now=NOW)


@pytest.mark.parametrize(
    ("subtotal", "expected"),
    [("100.00", "15.00"), ("19.99", "3.00"), ("0.10", "0.02"), ("0.00", "0.00")],
)
def test_percent_discount(subtotal, expected):
    assert discount_for(make(), Decimal(subtotal)) == Decimal(expected)


def test_fixed_discount_never_exceeds_subtotal():
    coupon = make(kind=CouponKind.FIXED, value=Decimal("25.00"))
    assert discount_for(coupon, Decimal("18.40")) == Decimal("18.40")


def test_min_subtotal_not_reached():
    coupon = make(min_subtotal=Decimal("50.00"))
    assert discount_for(coupon, Decimal("49.99")) == Decimal("0.00")
"""

FILES["tests/test_i18n.py"] = r"""import json
import re

import pytest

from app.i18n import HERE, SUPPORTED, catalogue, pick_locale, translate

PLACEHOLDER = re.compile(r"{(\w+)}")


def load(locale):
    return json.loads((HERE / f"{locale}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("locale", SUPPORTED)
def test_locale_file_is_valid_json(locale):
    assert isinstance(load(locale), dict)


@pytest.mark.parametrize("locale", SUPPORTED)
def test_locale_files_are_sorted(locale):
    keys = list(load(locale))
    assert keys == sorted(keys), f"{locale}.json keys are not sorted"


@pytest.mark.parametrize("locale", ["de", "zh_CN"])
def test_placeholders_match_english(locale):
    english = catalogue("en")
    for key, text in catalogue(locale).items():
        assert key in english, f"{locale}.json has {key!r}, en.json does not"
        assert set(PLACEHOLDER.findall(text)) == set(PLACEHOLDER.findall(english[key])), key


def test_missing_key_falls_back_to_english():
    expected = catalogue("de").get("errors.internal", catalogue("en")["errors.internal"])
    assert translate("errors.internal", "de") == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [(None, "en"), ("de-DE,de;q=0.9", "de"), ("zh-CN,zh;q=0.9", "zh_CN"), ("zh-Hans", "zh_CN"), ("fr-FR", "en")],
)
def test_pick_locale(header, expected):
    assert pick_locale(header) == expected
"""

FILES["tests/test_checkout.py"] = r"""from decimal import Decimal

import pytest

from app.models.coupon import Coupon, CouponKind
from app.models.product import Product

QUOTE = "/api/v1/checkout/quote"
CHECKOUT = "/api/v1/checkout"


@pytest.fixture
def coupons(db):
    db.add_all(
        [
            Coupon(code="SAVE10", kind=CouponKind.PERCENT, value=Decimal("10")),
            Coupon(code="FIVEOFF", kind=CouponKind.FIXED, value=Decimal("5.00")),
        ]
    )
    db.commit()


def test_quote_without_coupon(client, cart):
    r = client.post(QUOTE, json={"cart_id": cart.id})
    assert r.status_code == 200
    body = r.json()
    assert body["subtotal"] == "42.00"
    assert body["discount"] == "0.00"
    assert body["coupon_code"] is None


def test_quote_with_percent_coupon(client, cart, coupons):
    r = client.post(QUOTE, json={"cart_id": cart.id, "coupon_code": "save10"})
    assert r.json()["discount"] == "4.20"
    assert r.json()["coupon_code"] == "SAVE10"


def test_quote_with_fixed_coupon(client, cart, coupons):
    r = client.post(QUOTE, json={"cart_id": cart.id, "coupon_code": "FIVEOFF"})
    assert r.json()["discount"] == "5.00"


def test_quote_unknown_coupon_is_ignored(client, cart):
    r = client.post(QUOTE, json={"cart_id": cart.id, "coupon_code": "NOPE"})
    assert r.status_code == 200
    assert r.json()["coupon_code"] is None


def test_quote_unknown_cart(client):
    r = client.post(QUOTE, json={"cart_id": "cart-00000000"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "NOT_FOUND"


def test_checkout_creates_order(client, cart, coupons):
    r = client.post(CHECKOUT, json={"cart_id": cart.id, "coupon_code": "SAVE10"})
    assert r.status_code == 201
    assert r.json()["status"] == "pending"


def test_checkout_closes_cart(client, db, cart):
    client.post(CHECKOUT, json={"cart_id": cart.id})
    db.refresh(cart)
    assert cart.closed


def test_checkout_twice_same_idempotency_key(client, cart):
    headers = {"Idempotency-Key": "a4c1f0e2-checkout"}
    first = client.post(CHECKOUT, json={"cart_id": cart.id}, headers=headers)
    second = client.post(CHECKOUT, json={"cart_id": cart.id}, headers=headers)
    assert first.json()["id"] == second.json()["id"]


def test_checkout_out_of_stock_between_quote_and_order(client, db, cart):
    client.post(QUOTE, json={"cart_id": cart.id})
    db.get(Product, "MUG-001").stock = 1
    db.commit()
    r = client.post(CHECKOUT, json={"cart_id": cart.id})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "OUT_OF_STOCK"
"""

FILES[
    "app/services/orders.py"
] = r'''"""Placing orders from priced carts; a repeated Idempotency-Key gives back the first order."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import ShopError
from app.models.cart import Cart
from app.models.order import IdempotencyKey, Order, OrderStatus
from app.services.pricing import Quote
from app.timeutil import utcnow


class IdempotencyConflict(ShopError):
    status_code = 409
    code = "IDEMPOTENCY_CONFLICT"


def place(db: Session, cart: Cart, quote: Quote, *, idempotency_key: str | None = None) -> Order:
    """An order for `cart` at the quoted total, and the cart closed; the same key twice, the same order."""
    if idempotency_key:
        known = db.scalars(select(IdempotencyKey).where(IdempotencyKey.key == idempotency_key)).first()
        if known is not None:
            if known.cart_id != cart.id:
                raise IdempotencyConflict("errors.idempotency_conflict")
            return db.get_one(Order, known.order_id)
    order = Order(cart_id=cart.id, total=quote.total, currency=quote.currency, status=OrderStatus.PENDING)
    order.created_at = utcnow()
    db.add(order)
    db.flush()
    if idempotency_key:
        db.add(IdempotencyKey(key=idempotency_key, cart_id=cart.id, order_id=order.id, created_at=utcnow()))
    cart.closed = True
    db.commit()
    return order
'''

FILES["pyproject.toml"] = r"""[project]
name = "shop-api"
version = "2.14.0"
requires-python = ">=3.11"
dependencies = [
    "fastapi>=0.115",
    "uvicorn[standard]>=0.32",
    "sqlalchemy>=2.0.36",
    "alembic>=1.14",
    "pydantic-settings>=2.6",
]

[project.optional-dependencies]
dev = ["pytest>=8.3", "pytest-asyncio>=0.24", "pytest-cov>=6.0", "httpx>=0.28", "ruff>=0.8", "mypy>=1.13"]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-p no:cacheprovider"
filterwarnings = ["error", "ignore::DeprecationWarning:passlib.*"]

[tool.ruff]
line-length = 120
extend-exclude = ["migrations"]

[tool.ruff.lint]
select = ["E", "F", "I", "B", "UP"]
"""

FILES[
    "migrations/versions/0007_coupon_expiry_naive.py"
] = r'''"""coupons.expires_at without a time zone (SQLite cannot store one)

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("coupons") as batch:
        batch.alter_column("expires_at", type_=sa.DateTime(timezone=False), existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("coupons") as batch:
        batch.alter_column("expires_at", type_=sa.DateTime(timezone=True), existing_nullable=True)
'''

# Files that exist but that the agent never opens: they show up in listings, greps and globs.
for _name in (
    "app/__init__.py",
    "app/db.py",
    "app/middleware.py",
    "app/models/__init__.py",
    "app/models/cart.py",
    "app/models/order.py",
    "app/models/product.py",
    "app/routers/__init__.py",
    "app/routers/catalog.py",
    "app/routers/health.py",
    "app/routers/orders.py",
    "app/schemas/__init__.py",
    "app/schemas/cart.py",
    "app/services/__init__.py",
    "app/services/shipping.py",
    "app/services/tax.py",
    "tests/__init__.py",
    "tests/test_auth.py",
    "tests/test_cart.py",
    "tests/test_catalog.py",
    "tests/test_health.py",
    "tests/test_orders.py",
    "tests/test_pricing.py",
    "tests/test_shipping.py",
    "tests/test_tax.py",
    "migrations/env.py",
    "migrations/versions/0001_initial.py",
    "migrations/versions/0002_products_stock.py",
    "migrations/versions/0003_orders.py",
    "migrations/versions/0004_idempotency_keys.py",
    "migrations/versions/0005_coupons.py",
    "migrations/versions/0006_coupon_min_subtotal.py",
):
    FILES.setdefault(_name, "")


# --- the message catalogues ------------------------------------------------------------------

# key: (English, German, Chinese)
_MESSAGES: dict[str, tuple[str, str, str]] = {
    "cart.empty": ("Your cart is empty.", "Ihr Warenkorb ist leer.", "购物车是空的"),
    "cart.item_added": (
        "{name} was added to your cart.",
        "{name} wurde in den Warenkorb gelegt.",
        "已将{name}加入购物车",
    ),
    "cart.item_removed": ("{name} was removed.", "{name} wurde entfernt.", "已移除{name}"),
    "cart.quantity_updated": ("Quantity updated.", "Menge aktualisiert.", "数量已更新"),
    "cart.saved_for_later": ("Saved for later.", "Für später gemerkt.", "已保存，稍后购买"),
    "checkout.coupon_applied": ("Coupon {code} applied.", "Gutschein {code} eingelöst.", "已使用优惠券 {code}"),
    "checkout.free_shipping": (
        "Free shipping from {amount}.",
        "Kostenloser Versand ab {amount}.",
        "满 {amount} 免运费",
    ),
    "checkout.payment_declined": (
        "Your payment was declined. Please try another method.",
        "Ihre Zahlung wurde abgelehnt. Bitte versuchen Sie eine andere Zahlungsart.",
        "付款被拒绝，请更换支付方式",
    ),
    "checkout.review_order": ("Review your order", "Bestellung prüfen", "确认订单"),
    "checkout.shipping_estimate": (
        "Arrives in {days} business days.",
        "Lieferung in {days} Werktagen.",
        "预计 {days} 个工作日送达",
    ),
    "checkout.thank_you": ("Thank you for your order!", "Vielen Dank für Ihre Bestellung!", "感谢您的订购！"),
    "email.order_confirmed.subject": (
        "Order {order_id} confirmed",
        "Bestellung {order_id} bestätigt",
        "订单 {order_id} 已确认",
    ),
    "email.order_shipped.subject": (
        "Order {order_id} is on its way",
        "Bestellung {order_id} ist unterwegs",
        "订单 {order_id} 已发货",
    ),
    "email.password_reset.subject": ("Reset your password", "Passwort zurücksetzen", "重置密码"),
    "errors.cart_closed": (
        "This cart has already been checked out.",
        "Dieser Warenkorb wurde bereits bestellt.",
        "该购物车已完成结算",
    ),
    "errors.cart_not_found": (
        "Cart {cart_id} was not found.",
        "Warenkorb {cart_id} nicht gefunden.",
        "找不到购物车 {cart_id}",
    ),
    "errors.coupon_invalid": (
        "Coupon {code} is not valid.",
        "Gutschein {code} ist ungültig.",
        "优惠券 {code} 无效",
    ),
    "errors.coupon_min_subtotal": (
        "Coupon {code} needs a subtotal of at least {amount}.",
        "Gutschein {code} gilt ab einem Warenwert von {amount}.",
        "优惠券 {code} 需满 {amount} 才能使用",
    ),
    "errors.coupon_used_up": (
        "Coupon {code} has been used up.",
        "Gutschein {code} ist aufgebraucht.",
        "优惠券 {code} 已被领完",
    ),
    "errors.idempotency_conflict": (
        "A different request with this Idempotency-Key was already processed.",
        "Eine andere Anfrage mit diesem Idempotency-Key wurde bereits verarbeitet.",
        "使用该 Idempotency-Key 的另一个请求已被处理",
    ),
    "errors.internal": ("Internal server error.", "Interner Serverfehler.", "服务器内部错误"),
    "errors.not_authenticated": ("Please sign in.", "Bitte melden Sie sich an.", "请先登录"),
    "errors.not_permitted": (
        "You are not allowed to do that.",
        "Dazu sind Sie nicht berechtigt.",
        "您没有执行此操作的权限",
    ),
    "errors.order_not_found": (
        "Order {order_id} was not found.",
        "Bestellung {order_id} nicht gefunden.",
        "找不到订单 {order_id}",
    ),
    "errors.out_of_stock": (
        "Only {available} of {sku} left in stock.",
        "Von {sku} sind nur noch {available} auf Lager.",
        "{sku} 仅剩 {available} 件库存",
    ),
    "errors.product_not_found": ("Product {sku} was not found.", "Artikel {sku} nicht gefunden.", "找不到商品 {sku}"),
    "errors.rate_limited": (
        "Too many requests. Try again in {seconds} seconds.",
        "Zu viele Anfragen. Bitte in {seconds} Sekunden erneut versuchen.",
        "请求过于频繁，请在 {seconds} 秒后重试",
    ),
    "orders.status.cancelled": ("Cancelled", "Storniert", "已取消"),
    "orders.status.delivered": ("Delivered", "Zugestellt", "已送达"),
    "orders.status.paid": ("Paid", "Bezahlt", "已付款"),
    "orders.status.pending": ("Awaiting payment", "Zahlung ausstehend", "待付款"),
    "orders.status.refunded": ("Refunded", "Erstattet", "已退款"),
    "orders.status.shipped": ("Shipped", "Versendet", "已发货"),
    "product.low_stock": ("Only {count} left", "Nur noch {count} verfügbar", "仅剩 {count} 件"),
    "product.out_of_stock": ("Out of stock", "Nicht vorrätig", "暂时缺货"),
    "product.reviews": ("{count} reviews", "{count} Bewertungen", "{count} 条评价"),
}

# field: (English, German, Chinese)
_FIELDS: dict[str, tuple[str, str, str]] = {
    "checkout.coupon_code": ("Coupon code", "Gutscheincode", "优惠码"),
    "profile.email": ("Email address", "E-Mail-Adresse", "邮箱地址"),
    "shipping.postcode": ("Postcode", "Postleitzahl", "邮政编码"),
}

# rule: (English, German, Chinese), "@" standing for the field's name
_RULES: dict[str, tuple[str, str, str]] = {
    "required": ("@ is required.", "@ ist erforderlich.", "@不能为空"),
    "too_long": (
        "@ must be at most {max} characters.",
        "@ darf höchstens {max} Zeichen lang sein.",
        "@不能超过 {max} 个字符",
    ),
}


def _catalogue(column: int) -> str:
    entries = {key: texts[column] for key, texts in _MESSAGES.items()}
    for field_key, names in _FIELDS.items():
        for rule, texts in _RULES.items():
            entries[f"validation.{field_key}.{rule}"] = texts[column].replace("@", names[column])
    return json.dumps(dict(sorted(entries.items())), ensure_ascii=False, indent=2) + "\n"


FILES["app/i18n/en.json"] = _catalogue(0)
FILES["app/i18n/de.json"] = _catalogue(1)
FILES["app/i18n/zh_CN.json"] = _catalogue(2)


# --- the test suite as pytest lists it ------------------------------------------------------


# module: its tests in file order; "name[a|b]" is a test parametrized with a and b
_SUITE_SPEC = {
    "test_auth.py": """test_login_ok test_login_wrong_password test_login_unknown_email
        test_login_locked_after_five_failures test_logout_clears_cookie test_refresh_token_rotates
        test_refresh_token_reuse_is_rejected test_password_reset_sends_email test_password_reset_token_expires
        test_signup_normalizes_email test_signup_duplicate_email
        test_password_policy[short|no_digit|no_letter|common|ok] test_session_cookie_flags[httponly|secure|samesite]""",
    "test_cart.py": """test_create_cart_defaults_to_de test_create_cart_uppercases_country test_add_line
        test_add_line_unknown_sku test_add_line_out_of_stock test_add_same_sku_twice_merges test_remove_line
        test_remove_missing_line_is_noop test_closed_cart_is_not_found test_summary_without_coupon
        test_summary_with_coupon test_summary_unknown_coupon_is_ignored test_summary_used_up_coupon_is_ignored
        test_add_line_quantity_bounds[-1|0|1|99|100] test_country_codes[DE|AT|CH|FR|NL|PL|xx]""",
    "test_catalog.py": """test_list_products test_list_products_paginates test_list_products_page_size_limit
        test_get_product test_get_product_unknown test_hidden_products_are_not_listed
        test_filter_by_category[tea|kitchen|gifts|sale|unknown] test_sort[price_asc|price_desc|newest|name|relevance]
        test_search[mug|sencha|kettle|gift-set|empty|umlaut] test_price_filter[0-10|10-50|50-100|100-0]""",
    "test_checkout.py": """test_quote_without_coupon test_quote_with_percent_coupon test_quote_with_fixed_coupon
        test_quote_unknown_coupon_is_ignored test_quote_unknown_cart test_checkout_creates_order
        test_checkout_closes_cart test_checkout_twice_same_idempotency_key test_checkout_idempotency_key_conflict
        test_checkout_out_of_stock_between_quote_and_order test_free_shipping_threshold[48.99|49.00|49.01]
        test_vat_by_country[DE|AT|FR|NL|CH]""",
    "test_discounts.py": """test_coupon_without_expiry_is_active test_expired_coupon_is_inactive
        test_coupon_expiring_later_is_active test_used_up_coupon_is_inactive
        test_percent_discount[100.00-15.00|19.99-3.00|0.10-0.02|0.00-0.00] test_fixed_discount_never_exceeds_subtotal
        test_min_subtotal_not_reached""",
    "test_health.py": "test_health test_ready_checks_database test_version_header",
    "test_inventory.py": """test_reserve_stock test_release_stock_on_remove test_release_stock_on_expiry
        test_reservation_expires_after_thirty_minutes test_oversell_is_rejected test_restock_webhook
        test_low_stock_threshold[1|5|10] test_stock_never_negative test_concurrent_reservations
        test_reservation_survives_quote test_checkout_consumes_reservation test_cancel_restocks[pending|paid]
        test_inventory_report_columns test_inventory_report_totals""",
    "test_i18n.py": """test_locale_file_is_valid_json[en|de|zh_CN] test_locale_files_are_sorted[en|de|zh_CN]
        test_placeholders_match_english[de|zh_CN] test_missing_key_falls_back_to_english
        test_pick_locale[None-en|de-DE,de;q=0.9-de|zh-CN,zh;q=0.9-zh_CN|zh-Hans-zh_CN|fr-FR-en]""",
    "test_orders.py": """test_list_orders_of_user test_get_order test_get_order_of_other_user_is_404
        test_cancel_pending_order test_cancel_shipped_order_is_rejected test_refund_paid_order
        test_order_numbers_are_sequential test_status_transitions[pending-paid|pending-shipped|pending-delivered|\
pending-cancelled|paid-paid|paid-shipped|paid-delivered|paid-cancelled|shipped-paid|shipped-shipped|shipped-delivered|\
shipped-cancelled] test_order_email[confirmed|shipped|refunded]""",
    "test_pricing.py": """test_empty_cart test_single_line test_many_lines test_discount_before_shipping
        test_tax_after_shipping test_total_is_rounded_to_cent test_unknown_coupon_logged
        test_subtotal_rounding[0|1|2|3|4|5|6|7|8|9|10|11]
        test_quote_property_based[0|1|2|3|4|5|6|7|8|9|10|11|12|13|14|15|16|17|18|19]""",
    "test_shipping.py": """test_cost_by_country[DE|AT|CH|FR|NL|PL|DK|SE] test_weight_tiers[0.5kg|2kg|5kg|10kg|31kg]
        test_free_shipping_after_discount test_bulky_items_never_free""",
    "test_tax.py": """test_vat_rate[DE|AT|FR|NL|PL|DK|SE|CH|GB] test_reduced_rate_for_tea test_rounding_half_up
        test_reverse_charge_with_vat_id""",
}


def _suite() -> list[str]:
    """Every test id of the suite, in the order pytest runs them (before the session adds any)."""
    ids = []
    for module, names in _SUITE_SPEC.items():
        for name in names.split():
            base, _, params = name.partition("[")
            for param in params.rstrip("]").split("|") if params else [""]:
                ids.append(f"tests/{module}::{base}" + (f"[{param}]" if param else ""))
    return ids


SUITE = _suite()
NEW_TESTS = [
    "tests/test_checkout_coupons.py::test_quote_with_expired_coupon_does_not_crash",
    "tests/test_checkout_coupons.py::test_quote_with_valid_coupon_applies_it",
]


def suite_with(extra: Iterable[str]) -> list[str]:
    """The suite with tests added, in pytest's order (files alphabetically, tests in file order)."""
    ids = [*SUITE, *extra]
    order = {tid: i for i, tid in enumerate(ids)}
    return sorted(ids, key=lambda tid: (tid.split("::")[0], order[tid]))


# --- ids, hashes and the clock ---------------------------------------------------------------

RNG = random.Random(482)
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def rid(prefix: str, n: int) -> str:
    return prefix + "".join(RNG.choice(BASE62) for _ in range(n))


def new_uuid() -> str:
    return str(uuid.UUID(int=RNG.getrandbits(128), version=4))


def sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def numbered(text: str, start: int = 1) -> str:
    """Text as the Read tool shows it: a right-aligned line number, an arrow, the line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{n:6d}→{line}" for n, line in enumerate(lines, start))


# --- the repository the agent works on ------------------------------------------------------


@dataclass(kw_only=True)
class Call:
    """One tool call and what came back."""

    name: str
    input: dict[str, Any]
    content: str
    result: Any  # the entry's toolUseResult
    is_error: bool = False


class Repo:
    """The files of the repository as the session changes them, and the tools that act on them."""

    def __init__(self) -> None:
        self.files = dict(FILES)
        self.original = dict(FILES)

    def path(self, rel: str) -> str:
        return f"{ROOT}/{rel}"

    def line_of(self, rel: str, needle: str) -> int:
        """The number of the first line of `rel` that holds `needle`."""
        for n, line in enumerate(self.files[rel].split("\n"), 1):
            if needle in line:
                return n
        raise KeyError(f"{needle!r} not in {rel}")

    def read(self, rel: str, offset: int | None = None, limit: int | None = None) -> Call:
        args: dict[str, Any] = {"file_path": self.path(rel)}
        if offset is not None:
            args["offset"] = offset
        if limit is not None:
            args["limit"] = limit
        if rel not in self.files:
            return Call(
                name="Read",
                input=args,
                content="<tool_use_error>File does not exist.</tool_use_error>",
                result="Error: File does not exist.",
                is_error=True,
            )
        lines = self.files[rel].split("\n")
        if lines[-1] == "":
            lines.pop()
        start = offset or 1
        chosen = lines[start - 1 : start - 1 + limit] if limit else lines[start - 1 :]
        body = "\n".join(chosen) + "\n"
        file = {
            "filePath": self.path(rel),
            "content": body,
            "numLines": len(chosen),
            "startLine": start,
            "totalLines": len(lines),
        }
        return Call(name="Read", input=args, content=numbered(body, start), result={"type": "text", "file": file})

    def write(self, rel: str, text: str) -> Call:
        self.files[rel] = text
        return Call(
            name="Write",
            input={"file_path": self.path(rel), "content": text},
            content=f"File created successfully at: {self.path(rel)}",
            result={"type": "create", "filePath": self.path(rel), "content": text, "structuredPatch": []},
        )

    def edit(self, rel: str, old: str, new: str, *, replace_all: bool = False) -> Call:
        before = self.files[rel]
        args: dict[str, Any] = {"file_path": self.path(rel), "old_string": old, "new_string": new}
        if replace_all:
            args["replace_all"] = True
        found = before.count(old)
        if found == 0 or (found > 1 and not replace_all):
            error = (
                f"String to replace not found in file.\nString: {old}"
                if found == 0
                else f"Found {found} matches of the string to replace, but replace_all is false."
            )
            return Call(
                name="Edit",
                input=args,
                content=f"<tool_use_error>{error}</tool_use_error>",
                result=f"Error: {error.splitlines()[0]}",
                is_error=True,
            )
        after = before.replace(old, new)
        self.files[rel] = after
        if replace_all:
            content = (
                f"The file {self.path(rel)} has been updated. All occurrences of '{old}' were successfully"
                f" replaced with '{new}'."
            )
        else:
            first = before[: before.index(old)].count("\n") + 1
            last = first + new.count("\n")
            lines = after.split("\n")
            lo, hi = max(1, first - 4), min(len(lines) - 1, last + 4)
            snippet = "\n".join(f"{n:6d}→{lines[n - 1]}" for n in range(lo, hi + 1))
            content = (
                f"The file {self.path(rel)} has been updated. Here's the result of running `cat -n` on a snippet"
                f" of the edited file:\n{snippet}"
            )
        result = {
            "filePath": self.path(rel),
            "oldString": old,
            "newString": new,
            "originalFile": before,
            "structuredPatch": _patch(before, after),
            "userModified": False,
            "replaceAll": replace_all,
        }
        return Call(name="Edit", input=args, content=content, result=result)

    def grep(self, pattern: str, where: str = "", *, glob: str | None = None, lines: bool = True) -> Call:
        """The Grep tool over the repository (content mode with line numbers, or files with matches)."""
        rx = re.compile(pattern)
        hits: list[str] = []
        files: list[str] = []
        for rel in sorted(self.files):
            if not rel.startswith(where) or (glob and not fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob)):
                continue
            found = [(n, line) for n, line in enumerate(self.files[rel].split("\n"), 1) if rx.search(line)]
            if found:
                files.append(rel)
                hits.extend(f"{self.path(rel)}:{n}:{line}" for n, line in found)
        args: dict[str, Any] = {"pattern": pattern, "path": self.path(where.rstrip("/")) if where else ROOT}
        if glob:
            args["glob"] = glob
        if lines:
            args |= {"output_mode": "content", "-n": True}
            body = "\n".join(hits)
            result = {"mode": "content", "numFiles": 0, "filenames": [], "content": body, "numLines": len(hits)}
            return Call(name="Grep", input=args, content=body or "No matches found", result=result)
        body = f"Found {len(files)} files\n" + "\n".join(files)
        return Call(
            name="Grep",
            input=args,
            content=body,
            result={"mode": "files_with_matches", "filenames": files, "numFiles": len(files)},
        )

    def grep_n(self, pattern: str, where: tuple[str, ...]) -> str:
        """What `grep -rn` prints: relative path, line number, line."""
        rx = re.compile(pattern)
        return "".join(
            f"{rel}:{n}:{line}\n"
            for rel in sorted(self.files)
            if rel.startswith(where)
            for n, line in enumerate(self.files[rel].split("\n"), 1)
            if rx.search(line)
        )

    def glob(self, pattern: str) -> Call:
        found = [self.path(rel) for rel in sorted(self.files) if fnmatch.fnmatch(rel, pattern)]
        return Call(
            name="Glob",
            input={"pattern": pattern},
            content="\n".join(found) if found else "No files found",
            result={"filenames": found, "durationMs": RNG.randint(4, 40), "numFiles": len(found), "truncated": False},
        )

    def _changed(self, new_files: bool) -> list[str]:
        """Files that differ from the session's start; new ones only if `new_files` (git diff shows untracked
        files only after ``git add -N``)."""
        return [
            rel
            for rel in sorted(self.files)
            if self.files[rel] != self.original.get(rel) and (new_files or rel in self.original)
        ]

    def diff(self, *, new_files: bool = False) -> str:
        """`git diff` of the working tree against the session's start."""
        out: list[str] = []
        for rel in self._changed(new_files):
            old, new = self.original.get(rel), self.files[rel]
            a = (old or "").splitlines(keepends=True)
            b = new.splitlines(keepends=True)
            head = [f"diff --git a/{rel} b/{rel}\n"]
            if old is None:
                head += ["new file mode 100644\n", f"index 0000000..{sha(new)[:7]}\n"]
            else:
                head.append(f"index {sha(old)[:7]}..{sha(new)[:7]} 100644\n")
            body = list(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{rel}", f"b/{rel}", n=3))
            out += head + [line if line.endswith("\n") else line + "\n" for line in body]
        return "".join(out)

    def diff_stat(self, *, new_files: bool = False) -> str:
        """`git diff --stat`."""
        rows = []
        total_add = total_del = 0
        for rel in self._changed(new_files):
            old, new = self.original.get(rel), self.files[rel]
            add = dele = 0
            for line in difflib.unified_diff((old or "").splitlines(), new.splitlines(), n=0):
                if line.startswith("+") and not line.startswith("+++"):
                    add += 1
                elif line.startswith("-") and not line.startswith("---"):
                    dele += 1
            total_add += add
            total_del += dele
            rows.append((rel, add, dele))
        width = max(len(r[0]) for r in rows)
        lines = [f" {rel.ljust(width)} | {a + d:3d} {'+' * min(a, 40)}{'-' * min(d, 40)}" for rel, a, d in rows]
        lines.append(f" {len(rows)} files changed, {total_add} insertions(+), {total_del} deletions(-)")
        return "\n".join(lines) + "\n"


def _patch(before: str, after: str) -> list[dict[str, Any]]:
    """The Edit tool's structuredPatch: unified-diff hunks as objects."""
    a, b = before.split("\n"), after.split("\n")
    hunks = []
    for group in difflib.SequenceMatcher(None, a, b).get_grouped_opcodes(4):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines: list[str] = []
        for tag, p1, p2, q1, q2 in group:
            if tag == "equal":
                lines += [" " + s for s in a[p1:p2]]
            else:
                lines += ["-" + s for s in a[p1:p2]] + ["+" + s for s in b[q1:q2]]
        hunks.append({"oldStart": i1 + 1, "oldLines": i2 - i1, "newStart": j1 + 1, "newLines": j2 - j1, "lines": lines})
    return hunks


def bash(command: str, output: str, *, code: int = 0, description: str | None = None, **flags: Any) -> Call:
    """A Bash call: stdout on success; on failure Claude Code's ``Exit code N`` text and an error flag."""
    args: dict[str, Any] = {"command": command}
    if description:
        args["description"] = description
    args |= flags
    output = output.rstrip("\n")
    if code:
        text = f"Exit code {code}\n{output}"
        return Call(name="Bash", input=args, content=text, result=f"Error: {text}", is_error=True)
    result = {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}
    return Call(name="Bash", input=args, content=output, result=result)


# --- pytest output -----------------------------------------------------------------------------


def rule(title: str = "", char: str = "=") -> str:
    return f" {title} ".center(80, char) if title else char * 80


PYTEST_HEAD = f"""{rule("test session starts")}
platform linux -- Python 3.11.9, pytest-8.3.4, pluggy-1.5.0{{python}}
rootdir: {ROOT}
configfile: pyproject.toml
plugins: anyio-4.6.2, asyncio-0.24.0, cov-6.0.0
asyncio: mode=Mode.STRICT, default_loop_scope=None"""


def pytest_run(
    ids: list[str],
    *,
    verbose: bool,
    seconds: float,
    failed: str | None = None,
    failure: str = "",
    reason: str = "",
) -> str:
    """pytest's output for running `ids` with -x: progress, then the first failure if there is one."""
    head = PYTEST_HEAD.replace("{python}", f" -- {ROOT}/.venv/bin/python" if verbose else "")
    out = [head, f"collecting ... collected {len(ids)} items" if verbose else f"collected {len(ids)} items", ""]
    ran = ids[: ids.index(failed) + 1] if failed else ids
    if verbose:
        for i, tid in enumerate(ran, 1):
            status = "FAILED" if tid == failed else "PASSED"
            out.append(f"{tid} {status}".ljust(73) + f" [{i * 100 // len(ids):3d}%]")
    else:
        current, files, dots = "", [], ""
        for i, tid in enumerate(ran, 1):
            module = tid.split("::")[0]
            if module != current:
                if dots:
                    files.append((current, dots, i - 1))
                current, dots = module, ""
            dots += "F" if tid == failed else "."
        files.append((current, dots, len(ran)))
        for module, marks, upto in files:
            out.append(f"{module} {marks}".ljust(73) + f" [{upto * 100 // len(ids):3d}%]")
    passed = len(ran) - (1 if failed else 0)
    if failed:
        name = failed.split("::")[1]
        out += ["", rule("FAILURES"), rule(name, "_"), failure.rstrip("\n"), rule("short test summary info")]
        out.append(f"FAILED {failed} - {reason}")
        out.append(rule("stopping after 1 failures", "!"))
        out.append(rule(f"1 failed, {passed} passed in {seconds:.2f}s"))
    else:
        out += ["", rule(f"{passed} passed in {seconds:.2f}s")]
    return "\n".join(out) + "\n"


# --- the server log the agent tails --------------------------------------------------------------

_ROUTES = [
    ("GET", "/api/v1/products?page={n}", 200),
    ("GET", "/api/v1/products?category={cat}&page={n}", 200),
    ("GET", "/api/v1/products/{sku}", 200),
    ("GET", "/api/v1/carts/{cart}/summary", 200),
    ("GET", "/api/v1/carts/{cart}/summary?coupon={coupon}", 200),
    ("POST", "/api/v1/carts/{cart}/lines", 200),
    ("DELETE", "/api/v1/carts/{cart}/lines/{sku}", 200),
    ("POST", "/api/v1/carts", 201),
    ("POST", "/api/v1/checkout/quote", 200),
    ("POST", "/api/v1/checkout", 201),
    ("GET", "/api/v1/orders?page={n}", 200),
    ("GET", "/api/v1/health", 200),
]
_SKUS = ["MUG-001", "TEA-014", "KTL-220", "TEA-031", "CUP-007", "GFT-102", "TEA-052", "BWL-019"]
_CATS = ["tea", "kitchen", "gifts", "sale"]
_COUPONS = ["FREESHIP", "STAFF20"]  # no expiry: the basket page priced them fine
_EXPIRING = ["SPRING15", "WELCOME10", "TEATIME5", "BLACKFRIDAY25"]  # an expiry: checkout crashed on them


def server_log(repo: Repo, size: int) -> str:
    """About `size` bytes of the service's log from the night before: access lines, a few slow
    queries, and the checkout crashes of #482 with their tracebacks."""
    rng = random.Random(90117)
    moment = datetime(2026, 3, 13, 21, 40, 2, 118000)
    site = f"{ROOT}/.venv/lib/python3.11/site-packages"
    line_cmp = repo.line_of("app/services/discounts.py", "coupon.expires_at <= now")
    line_call = repo.line_of("app/services/pricing.py", "elif not coupon_is_active(coupon)")
    line_quote = repo.line_of("app/routers/checkout.py", "return QuoteOut.from_quote")
    line_order = repo.line_of("app/routers/checkout.py", "q = price_cart(db, cart, body.coupon_code)")
    carts = [f"cart-{rng.getrandbits(32):08x}" for _ in range(60)]
    out: list[str] = []
    written = 0
    crashes = 0
    while written < size:
        moment += timedelta(milliseconds=rng.randint(200, 6000))
        stamp = moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
        method, route, status = rng.choice(_ROUTES)
        cart, sku, cat = rng.choice(carts), rng.choice(_SKUS), rng.choice(_CATS)
        path = route.format(n=rng.randint(1, 9), cat=cat, sku=sku, cart=cart, coupon=rng.choice(_COUPONS))
        req = f"{rng.getrandbits(32):08x}"
        block: list[str]
        if path.startswith("/api/v1/checkout") and rng.random() < 0.3:
            crashes += 1
            endpoint, line = ("quote", line_quote) if path.endswith("quote") else ("checkout", line_order)
            code_line = (
                "return QuoteOut.from_quote(price_cart(db, cart, body.coupon_code))"
                if endpoint == "quote"
                else "q = price_cart(db, cart, body.coupon_code)"
            )
            event = SENTRY_EVENT if crashes == 3 else str(uuid.UUID(int=rng.getrandbits(128), version=4))
            block = [
                f"{stamp} INFO  shop.pricing rid={req} cart {cart}: coupon {rng.choice(_EXPIRING)} requested",
                f"{stamp} ERROR shop.errors rid={req} unhandled error on POST {path}",
                "Traceback (most recent call last):",
                f'  File "{site}/starlette/middleware/errors.py", line 165, in __call__',
                "    await self.app(scope, receive, _send)",
                f'  File "{ROOT}/app/middleware.py", line 31, in __call__',
                "    await self.app(scope, receive, send_with_request_id)",
                f'  File "{site}/starlette/routing.py", line 73, in app',
                "    response = await f(request)",
                f'  File "{site}/fastapi/routing.py", line 212, in run_endpoint_function',
                "    return await run_in_threadpool(dependant.call, **values)",
                f'  File "{ROOT}/app/routers/checkout.py", line {line}, in {endpoint}',
                f"    {code_line}",
                f'  File "{ROOT}/app/services/pricing.py", line {line_call}, in price_cart',
                "    elif not coupon_is_active(coupon):",
                f'  File "{ROOT}/app/services/discounts.py", line {line_cmp}, in coupon_is_active',
                "    if coupon.expires_at is not None and coupon.expires_at <= now:",
                "TypeError: can't compare offset-naive and offset-aware datetimes",
                f"{stamp} INFO  shop.sentry rid={req} event sent: {event}",
                f"{stamp} INFO  shop.access rid={req} POST {path} 500 Internal Server Error {rng.randint(8, 40)}ms",
            ]
        elif rng.random() < 0.02:
            block = [
                f"{stamp} WARN  shop.db rid={req} slow query ({rng.randint(480, 2400)} ms): SELECT products.sku,"
                " products.name, products.price, products.stock FROM products WHERE products.hidden = 0"
                " ORDER BY products.created_at DESC LIMIT ? OFFSET ?"
            ]
        else:
            code = status if rng.random() > 0.03 else rng.choice([404, 409, 422])
            block = [f"{stamp} {_app_line(rng, method, path, cart, sku, cat)}"]
            if rng.random() < 0.5:
                block.append(f"{stamp} {rng.choice(_CHATTER)}")
            block.append(
                f"{stamp} INFO  shop.access rid={req} {method} {path} {code} {_REASONS[code]} {rng.randint(3, 90)}ms"
            )
        out += block
        written += sum(len(line) + 1 for line in block)
    return "\n".join(out) + "\n"


_REASONS = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity"}


def _app_line(rng: random.Random, method: str, path: str, cart: str, sku: str, cat: str) -> str:
    """A line the service logs while it handles a request, in words."""
    if path.startswith("/api/v1/products"):
        cache = rng.choice(["cache hit", "cache hit", "cache miss, loaded from the database"])
        what = f"category {cat}" if "category" in path else "all categories"
        return (
            f"DEBUG shop.catalog listing products in {what}, sorted by newest first, hidden products excluded ({cache})"
        )
    if "/lines" in path and method == "DELETE":
        return f"INFO  shop.cart cart {cart}: removed {sku}, its reserved stock goes back to the shelf"
    if "/lines" in path:
        return (
            f"INFO  shop.cart cart {cart}: added {rng.randint(1, 3)} x {sku} at the current list price, stock"
            " reserved until checkout"
        )
    if path.startswith("/api/v1/orders"):
        return "DEBUG shop.orders listing the orders of the signed-in customer, newest first"
    if path.startswith("/api/v1/checkout"):
        return (
            f"INFO  shop.payments payment intent created for cart {cart}; waiting for the provider to confirm it"
            " through the webhook"
        )
    if "coupon=" in path:
        code = path.rsplit("=", 1)[1]
        return f"DEBUG shop.pricing cart {cart}: priced with coupon {code}, discount applied before shipping"
    if "summary" in path:
        return (
            f"DEBUG shop.pricing cart {cart}: priced without a coupon; free shipping threshold not reached, the"
            " standard rate applies"
        )
    return "DEBUG shop.health database answered the readiness probe, migrations are at the expected head"


_CHATTER = [
    "DEBUG shop.db connection checked out from the pool (size 5, overflow 0) and returned after the response was sent",
    "DEBUG shop.auth session cookie refreshed for a signed-in customer, it now expires in thirty minutes",
    "DEBUG shop.i18n locale picked from the Accept-Language header of the request",
    "DEBUG shop.cache product listing cache is warm, the next refresh is due in five minutes",
]


# --- the session file ------------------------------------------------------------------------


class Session:
    """Builds the entries of one Claude Code session, in the order Claude Code writes them."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.parent: str | None = None
        self.clock = START
        self.context = 14_800  # tokens of system prompt and tool definitions, for the usage figures

    def _tick(self, low: float, high: float) -> str:
        self.clock += timedelta(seconds=RNG.uniform(low, high))
        return iso(self.clock)

    def _entry(self, kind: str, timestamp: str, **fields: Any) -> dict[str, Any]:
        entry_uuid = new_uuid()
        entry = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": ROOT,
            "sessionId": SESSION_ID,
            "version": VERSION,
            "gitBranch": BRANCH,
            "type": kind,
            **fields,
            "uuid": entry_uuid,
            "timestamp": timestamp,
        }
        self.lines.append(entry)
        return entry

    def prompt(self, text: str, *, pause: tuple[float, float] = (300, 1200)) -> None:
        """The user types a message (after a pause); Claude Code snapshots the files first."""
        stamp = self._tick(*pause)
        message_uuid = new_uuid()
        self.lines.append(
            {
                "type": "file-history-snapshot",
                "messageId": message_uuid,
                "snapshot": {"messageId": message_uuid, "trackedFileBackups": {}, "timestamp": stamp},
                "isSnapshotUpdate": False,
            }
        )
        entry = self._entry("user", stamp, message={"role": "user", "content": text})
        entry["uuid"] = message_uuid
        self.parent = message_uuid
        self.context += len(text) // 3

    def turn(self, *, text: str | None = None, thinking: str | None = None, calls: Iterable[Call] = ()) -> None:
        """One API response: its blocks, one entry each; then one entry per tool result, each hung
        off the entry of its own call."""
        calls = list(calls)
        message_id = rid("msg_01", 22)
        request_id = rid("req_011C", 20)
        blocks: list[tuple[dict[str, Any], Call | None]] = []
        if thinking:
            signature = base64.b64encode(RNG.randbytes(120)).decode()
            blocks.append(({"type": "thinking", "thinking": thinking, "signature": signature}, None))
        if text:
            blocks.append(({"type": "text", "text": text}, None))
        for made_call in calls:
            use = {"type": "tool_use", "id": rid("toolu_01", 22), "name": made_call.name, "input": made_call.input}
            blocks.append((use, made_call))
        out_tokens = sum(len(json.dumps(b, ensure_ascii=False)) for b, _ in blocks) // 4 + 12
        made: list[tuple[dict[str, Any], dict[str, Any], Call]] = []
        self._tick(4, 30)  # the model thinks
        for i, (block, call) in enumerate(blocks):
            last = i == len(blocks) - 1
            message = {
                "model": MODEL,
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "content": [block],
                "stop_reason": ("tool_use" if calls else "end_turn") if last else None,
                "usage": {
                    "input_tokens": RNG.randint(3, 12),
                    "cache_creation_input_tokens": RNG.randint(200, 2400),
                    "cache_read_input_tokens": self.context,
                    "output_tokens": out_tokens if last else RNG.randint(1, 30),
                },
            }
            entry = self._entry("assistant", self._tick(0.5, 8), requestId=request_id, message=message)
            self.parent = entry["uuid"]
            if call is not None:
                made.append((entry, block, call))
        self.context += out_tokens
        for entry, block, call in made:
            result: dict[str, Any] = {"tool_use_id": block["id"], "type": "tool_result", "content": call.content}
            if call.is_error or call.name == "Bash":
                result["is_error"] = call.is_error
            self.parent = entry["uuid"]
            answer = self._entry(
                "user",
                self._tick(0.2, 3 if call.name != "Bash" else 40),
                message={"role": "user", "content": [result]},
                toolUseResult=call.result,
                sourceToolAssistantUUID=entry["uuid"],
            )
            self.parent = answer["uuid"]
            self.context += len(call.content) // 3

    def dump(self, title: str) -> str:
        last = next(e["uuid"] for e in reversed(self.lines) if e.get("type") in ("user", "assistant"))
        head = {"type": "summary", "summary": title, "leafUuid": last}
        return "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in [head, *self.lines])


# --- the story ---------------------------------------------------------------------------------


def todo(items: list[tuple[str, str]]) -> Call:
    todos = [{"content": c, "status": s, "activeForm": c} for c, s in items]
    return Call(
        name="TodoWrite",
        input={"todos": todos},
        content="Todos have been modified successfully.",
        result={"oldTodos": [], "newTodos": todos},
    )


COMMITS = [
    ("Maya Lindqvist", "2026-03-12", "Use timezone-aware now() everywhere (#471)"),
    ("Jonas Albrecht", "2026-03-11", "Bump fastapi to 0.115.6 and uvicorn to 0.32.1"),
    ("Maya Lindqvist", "2026-03-10", "Cart summary: show unit prices with currency"),
    ("Priya Raman", "2026-03-09", "Free shipping threshold from settings (#466)"),
    ("Jonas Albrecht", "2026-03-06", "Idempotency keys for POST /checkout (#458)"),
    ("Priya Raman", "2026-03-05", "Store coupon expiry without a time zone (migration 0007)"),
    ("Tomasz Wójcik", "2026-03-04", "i18n: zh_CN catalogue (#449)"),
    ("Maya Lindqvist", "2026-03-03", "Pick locale from Accept-Language"),
    ("Jonas Albrecht", "2026-03-02", "Log request ids on access and error lines"),
    ("Priya Raman", "2026-02-27", "Coupons: min_subtotal (#437)"),
    ("Tomasz Wójcik", "2026-02-26", "Tests: property-based quote checks"),
    ("Jonas Albrecht", "2026-02-25", "Sentry: send events for 5xx only"),
]
HASHES = {subject: sha(author + date + subject) for author, date, subject in COMMITS}
BAD = HASHES["Use timezone-aware now() everywhere (#471)"]


def git_log_oneline() -> str:
    return "\n".join(f"{HASHES[s][:7]} {s}" for _, _, s in COMMITS) + "\n"


def git_show_471(repo: Repo) -> str:
    n = repo.line_of("app/timeutil.py", "def utcnow")
    return f"""commit {BAD}
Author: Maya Lindqvist <maya.lindqvist@shopworks.example>
Date:   Thu Mar 12 16:48:03 2026 +0100

    Use timezone-aware now() everywhere (#471)

    datetime.utcnow() is deprecated in 3.12 and returns a naive value that
    mixes badly with the aware timestamps the payment webhooks send.
    utcnow() now returns an aware UTC datetime; callers unchanged.

 app/services/orders.py |  4 ++--
 app/timeutil.py        |  6 +++---
 tests/test_orders.py   |  8 ++++----
 3 files changed, 9 insertions(+), 9 deletions(-)

diff --git a/app/timeutil.py b/app/timeutil.py
index 4be1f0a..9d2c7e3 100644
--- a/app/timeutil.py
+++ b/app/timeutil.py
@@ -{n - 3},9 +{n - 3},9 @@
 \"\"\"Clock helpers. Everything in shop-api works in UTC.\"\"\"

 from __future__ import annotations

-from datetime import datetime
+from datetime import datetime, timezone


 def utcnow() -> datetime:
-    \"\"\"The current time in UTC (naive).\"\"\"
-    return datetime.utcnow()
+    \"\"\"The current time, timezone-aware, in UTC.\"\"\"
+    return datetime.now(timezone.utc)
"""


def build() -> str:
    """The session file's text."""
    RNG.seed(482)  # the same ids on every call
    repo = Repo()
    s = Session()

    s.prompt(
        f"Please fix issue #482 ({ISSUE_URL}): since Thursday evening POST /api/v1/checkout and"
        " /api/v1/checkout/quote return 500 for some carts that have a coupon code. Sentry groups them under"
        f' {SENTRY_URL} as "TypeError: can\'t compare offset-naive and offset-aware datetimes" (one of the events'
        f" is {SENTRY_EVENT}). Last night's log is in var/log/shop-api.log.\n\n"
        "From Sentry:\n"
        "```\n"
        "TypeError: can't compare offset-naive and offset-aware datetimes\n"
        "  app/services/discounts.py in coupon_is_active\n"
        "  app/services/pricing.py in price_cart\n"
        "  app/routers/checkout.py in quote\n"
        "first seen: 2026-03-12 17:05 UTC   events: 214   users: 161\n"
        "release: shop-api@2.14.0   environment: production\n"
        "tags: endpoint=/api/v1/checkout/quote (71%), /api/v1/checkout (29%); client=ShopApp/3.7.2, web\n"
        "```\n\n"
        "Rules for this repo:\n"
        "- never touch the migrations folder (migrations/ is generated and reviewed separately by the DBA)\n"
        "- run tests with `pytest -x`, not tox\n"
        "- the dev server must run on localhost:8081 (8080 is the payments mock)\n"
        "- no new dependencies\n\n"
        "Add a regression test. Don't commit, I'll review the diff first.",
        pause=(0, 0),
    )
    s.turn(
        thinking="A naive/aware datetime comparison that started failing on Thursday evening. Something changed how"
        " a datetime is produced or stored. Look at the recent commits first, then find the comparison the"
        " traceback points to.",
        text="I'll look at the recent history and the layout of the service first.",
        calls=[
            bash("git log --oneline -12", git_log_oneline(), description="Show recent commits"),
            bash(
                "git status --short && git branch --show-current",
                BRANCH,
                description="Check working tree and branch",
            ),
        ],
    )
    s.turn(
        text='Two suspects in the history: #471 ("Use timezone-aware now() everywhere", two days ago) and the'
        " migration that stores coupon expiry without a time zone (0007). Mixing the two would give exactly"
        " this TypeError. Let me see the layout.",
        calls=[repo.glob("app/**/*.py")],
    )
    s.turn(
        text="A small FastAPI app. Checking the settings (port, database).",
        calls=[repo.read("app/config.py")],
    )
    s.turn(
        text="The default port is already 8081 and the dev database is SQLite in var/shop.db. The coupon logic"
        " should be in a coupons service.",
        calls=[repo.read("app/services/coupons.py")],
    )
    s.turn(
        text="No coupons.py. Listing the services:",
        calls=[repo.glob("app/services/*.py")],
    )
    s.turn(
        calls=[
            repo.read("app/services/discounts.py"),
            repo.read("app/models/coupon.py"),
            repo.read("app/timeutil.py"),
        ]
    )
    s.turn(
        thinking="coupon_is_active does `coupon.expires_at <= now` with now = utcnow(). utcnow() returns"
        " datetime.now(timezone.utc): aware. Coupon.expires_at is DateTime(timezone=False): SQLAlchemy hands back"
        " a naive datetime. Comparing naive with aware raises TypeError for ordering comparisons (== would just be"
        " False). So any coupon with a non-null expiry crashes pricing; coupons without expiry pass because of the"
        " `is not None` short-circuit. That matches 'some carts that have a coupon code'. Check the data to be"
        " sure which coupons have an expiry.",
        text="`coupon_is_active` compares `coupon.expires_at` (a naive column) with `utcnow()`, which is aware."
        " Ordering comparisons between naive and aware datetimes raise exactly this TypeError, and only coupons"
        " with an expiry reach the comparison. Let me see what the database holds.",
        calls=[
            bash(
                'sqlite3 -header var/shop.db "SELECT code, kind, value, expires_at, typeof(expires_at) AS t'
                ' FROM coupons ORDER BY id"',
                "code|kind|value|expires_at|t\n"
                "WELCOME10|percent|10|2026-06-30 23:59:59.000000|text\n"
                "SPRING15|percent|15|2026-03-13 00:00:00.000000|text\n"
                "FREESHIP|fixed|4.9||null\n"
                "TEATIME5|fixed|5|2026-04-01 00:00:00.000000|text\n"
                "BLACKFRIDAY25|percent|25|2025-11-30 23:59:59.000000|text\n"
                "STAFF20|percent|20||null",
                description="Stored coupon expiry values",
            )
        ],
    )
    s.turn(
        text="Stored as text without an offset; FREESHIP and STAFF20 have no expiry, which is why they still work."
        " Reading (not changing) the migration that made the column naive:",
        calls=[repo.read("migrations/versions/0007_coupon_expiry_naive.py")],
    )
    s.turn(
        text="So `Coupon.expires_at` is naive UTC since migration 0007, and `utcnow()` has been aware since #471."
        " Let me confirm with the commit.",
        calls=[bash(f"git show {BAD[:7]}", git_show_471(repo), description="Show commit #471")],
    )
    s.turn(
        thinking="The commit message says callers are unchanged, which was true for the code but not for the data:"
        " every comparison between utcnow() and a timestamp read from SQLite changed meaning. Sentry says first"
        " seen 2026-03-12 17:05 UTC, which matches the deploy of #471 that afternoon. The grep has to cover"
        " every datetime comparison with values from the database, not only coupons: orders, idempotency keys,"
        " sessions. If any other comparison mixes the two, it will crash the same way, just less often.",
        text='Confirmed: #471 changed `utcnow()` from naive to aware and said "callers unchanged". Who else'
        " compares against it?",
        calls=[repo.grep(r"expires_at|utcnow\(\)")],
    )
    s.turn(
        text="The migrations folder shows up in the grep; I won't touch it. The other uses of `utcnow()` only"
        " create timestamps (orders, idempotency keys) and never compare them with stored values, so the only"
        " ordering comparison that mixes the two kinds is in `coupon_is_active`. Now the callers:",
        calls=[repo.read("app/services/pricing.py"), repo.read("app/routers/checkout.py")],
    )
    s.turn(
        calls=[
            bash(
                "grep -rn price_cart app tests",
                repo.grep_n("price_cart", ("app/", "tests/")),
                description="Find every caller of price_cart",
            ),
        ]
    )
    s.turn(
        thinking="Three callers of price_cart: quote and checkout in app/routers/checkout.py, and the cart summary"
        " in app/routers/cart.py. All three reach coupon_is_active for any coupon code that exists, so the basket"
        " page is affected as well, not only checkout; the issue only mentions checkout because that is where"
        " customers complain. price_cart itself is fine: it only asks coupon_is_active and logs. The fix belongs"
        " in the comparison, not in the callers. Still worth knowing how old the comparison is: if it was written"
        " after 0007 against an aware value it would be a different story.",
        text="`price_cart` has three callers: quote, checkout and the cart summary (GET /carts/{id}/summary), so"
        " the basket page must be crashing too for these coupons. Who wrote the expiry check, and when?",
        calls=[
            bash(
                f"git blame -L {repo.line_of('app/services/discounts.py', 'def coupon_is_active')},+9"
                " app/services/discounts.py",
                _blame(repo),
                description="Who wrote the expiry check",
            )
        ],
    )
    log = server_log(repo, 100_000)
    s.turn(
        text="The check itself is old (February, made inclusive in #437); it only broke when `utcnow()` changed"
        " under it, so the fix is about the values compared, not about the rule. Before changing anything, let"
        " me check last night's log: is every 500 this TypeError, or is something else mixed in?",
        calls=[bash("wc -l var/log/shop-api.log && ls -la var/log/", _log_listing(log), description="Size of the log")],
    )
    s.turn(
        calls=[
            bash(
                f"tail -n {log.count(chr(10))} var/log/shop-api.log",
                log,
                description="Last part of last night's server log",
            )
        ]
    )
    crashes = log.count("Traceback (most recent call last):")
    s.turn(
        thinking=f"{crashes} tracebacks, every one the same: checkout.py -> pricing.price_cart ->"
        " discounts.coupon_is_active, TypeError at the expiry comparison. Both /checkout and /checkout/quote."
        f" The Sentry event {SENTRY_EVENT} is among them. The rest of the log is normal traffic (catalog, carts,"
        " health probes), a few slow product queries that are unrelated. No other 500s. The summary requests"
        " with ?coupon= all use FREESHIP or STAFF20 and answer 200: those two have no expiry. So one root cause.",
        text=f"The log has {crashes} crashes and they are all the same traceback: `price_cart` ->"
        " `coupon_is_active` -> `TypeError: can't compare offset-naive and offset-aware datetimes`, on both"
        f" /api/v1/checkout and /api/v1/checkout/quote; Sentry event {SENTRY_EVENT} is one of them. Everything"
        " else is ordinary traffic plus a few unrelated slow product queries, and the basket page requests in"
        " it only carried FREESHIP and STAFF20, the coupons without an expiry. One root cause, then. Before"
        " writing a regression test, the existing discount tests and the fixtures they use:",
        calls=[repo.read("tests/test_discounts.py"), repo.read("tests/conftest.py")],
    )
    s.turn(
        thinking="test_discounts passes a naive NOW explicitly, so it never sees the aware utcnow(); and the"
        " checkout tests create coupons without expiry. Plan: a regression test through the API with an expired"
        " naive expiry (as the DB stores it), then normalize in one place.\n\n"
        "Where to normalize? Three places are possible:\n"
        "1. In the database: store aware values. That needs a migration (DateTime(timezone=True) does nothing on"
        " SQLite anyway, it would have to become an ISO string with offset) and migrations/ is off limits. No.\n"
        "2. In the model: a SQLAlchemy TypeDecorator that attaches UTC on load. Clean, but it changes what every"
        " reader of Coupon.expires_at gets, including the admin export, and it is the kind of change the DBA"
        " reviews with the migrations. Too wide for a hotfix.\n"
        "3. At the comparison: a small as_utc() helper in app/timeutil.py that treats naive values as UTC, which"
        " is what the column comment and migration 0007 promise. Smallest change, obviously correct, easy to"
        " review.\n\n"
        "Go with 3. The regression test must create the coupon the way production stores it: naive UTC, and it"
        " must go through the HTTP API so the default utcnow() path runs. The cart fixture is worth 42.00, so a"
        " 10% coupon gives 4.20, easy to assert. Also a valid-coupon case so the fix doesn't just drop every"
        " coupon with an expiry.",
        text="The unit tests pass a naive `NOW` explicitly, so they never hit the aware `utcnow()`, and the"
        " checkout tests use coupons without an expiry. I'll first write a regression test that goes through the"
        " API with a coupon stored the way the database stores it.",
        calls=[
            todo(
                [
                    ("Write a failing regression test for #482", "in_progress"),
                    ("Compare coupon expiry in UTC regardless of naive/aware", "pending"),
                    ("Run pytest -x on the whole suite", "pending"),
                    ("Check on the dev server (localhost:8081)", "pending"),
                ]
            )
        ],
    )
    s.turn(
        text="The test stores the expiry the way production does (naive UTC, `expires_at` with `tzinfo=None`) and"
        " goes through `POST /api/v1/checkout/quote`, so the default `utcnow()` branch runs. One expired coupon"
        " (expect no crash and no discount) and one valid (expect 10% of 42.00).",
        calls=[repo.write("tests/test_checkout_coupons.py", TEST_V1)],
    )
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_checkout_coupons.py",
                pytest_run(
                    NEW_TESTS,
                    verbose=False,
                    seconds=0.84,
                    failed=NEW_TESTS[0],
                    failure=_failure_api(repo, s.clock),
                    reason="TypeError: can't compare offset-naive and offset-aware datetimes",
                ),
                code=1,
                description="Run the new regression test",
            )
        ]
    )
    s.turn(
        thinking="The failure is the production traceback, reproduced through the API: quote -> price_cart ->"
        " coupon_is_active, with now=datetime(..., tzinfo=timezone.utc) from utcnow() and the naive value from the"
        " database. Good, the test fails for the right reason. The captured log shows the generic 500 handler"
        " logging it, like the server log did.",
        text="Reproduced. I'll normalize both sides to aware UTC in a helper in app/timeutil.py, so the model and"
        " the database stay as they are (no migration: migrations/ is off limits, and the stored values are"
        " already UTC).",
        calls=[
            repo.edit(
                "app/timeutil.py",
                "def isoformat_z(value: datetime) -> str:",
                "def as_utc(value: datetime) -> datetime:\n"
                '    """`value` as an aware UTC datetime; a naive value is taken to be UTC already."""\n'
                "    if value.tzinfo is None:\n"
                "        return value.replace(tzinfo=timezone.utc)\n"
                "    return value.astimezone(timezone.utc)\n\n\n"
                "def isoformat_z(value: datetime) -> str:",
            )
        ],
    )
    s.turn(
        calls=[
            repo.edit(
                "app/services/discounts.py",
                "    if coupon.expires_at is not None and coupon.expires_at < now:",
                "    if coupon.expires_at is not None and as_utc(coupon.expires_at) < now:",
            )
        ]
    )
    start = repo.line_of("app/services/discounts.py", "def coupon_is_active")
    s.turn(
        text="Wrong operator from memory; re-reading the function.",
        calls=[repo.read("app/services/discounts.py", offset=start, limit=9)],
    )
    s.turn(
        calls=[
            repo.edit(
                "app/services/discounts.py",
                "    if coupon.expires_at is not None and coupon.expires_at <= now:",
                "    if coupon.expires_at is not None and as_utc(coupon.expires_at) <= now:",
            ),
            repo.edit(
                "app/services/discounts.py",
                "from app.timeutil import utcnow",
                "from app.timeutil import as_utc, utcnow",
            ),
        ]
    )
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_checkout_coupons.py",
                pytest_run(NEW_TESTS, verbose=False, seconds=0.71),
                description="Re-run the regression test",
            )
        ]
    )
    full = suite_with(NEW_TESTS)
    failing = "tests/test_discounts.py::test_expired_coupon_is_inactive"
    s.turn(
        text="Both pass: the expired coupon is left out instead of crashing, and the valid one still takes 4.20"
        " off. Now the whole suite with -x.",
        calls=[
            bash(
                "pytest -x",
                pytest_run(
                    full,
                    verbose=False,
                    seconds=3.71,
                    failed=failing,
                    failure=_failure_unit(repo),
                    reason="TypeError: can't compare offset-naive and offset-aware datetimes",
                ),
                code=1,
                description="Run the full test suite, stop at the first failure",
            )
        ],
    )
    s.turn(
        thinking="Now the unit test passes a naive now and expires_at becomes aware. Normalizing only one side was"
        " half the job: normalize `now` as well. That also protects callers that pass naive values.\n\n"
        "Should I change the test instead, to pass an aware NOW? No: the test documents that callers may pass"
        " their own now, and a naive one is exactly what any timestamp read back from SQLite is. Making the"
        " function accept both is the robust choice. Also"
        " careful with `now or utcnow()`: a datetime is always truthy, so `now is not None` is the honest test.",
        text="Now the other direction: the unit tests pass a naive `now`. I'll normalize `now` as well, so the"
        " comparison is aware on both sides whatever callers pass.",
        calls=[
            repo.edit(
                "app/services/discounts.py",
                "    now = now or utcnow()\n",
                "    now = as_utc(now) if now is not None else utcnow()\n",
            )
        ],
    )
    s.turn(
        calls=[
            bash(
                "pytest -x -q",
                pytest_run(full, verbose=False, seconds=3.94),
                description="Run the full test suite",
            )
        ]
    )
    s.turn(
        text=f"All {len(full)} tests pass. Summary so far: expired coupons are dropped from the quote again"
        " instead of crashing. I'll also add unit tests for the naive/aware mix.",
        calls=[
            repo.edit(
                "tests/test_discounts.py",
                "def test_used_up_coupon_is_inactive():",
                "def test_naive_expiry_against_aware_now():\n"
                "    aware_now = NOW.replace(tzinfo=timezone.utc)\n"
                "    assert not coupon_is_active(make(expires_at=NOW - timedelta(minutes=5)), now=aware_now)\n"
                "    assert coupon_is_active(make(expires_at=NOW + timedelta(minutes=5)), now=aware_now)\n\n\n"
                "def test_used_up_coupon_is_inactive():",
            )
        ],
    )
    s.turn(
        calls=[
            repo.edit(
                "tests/test_discounts.py",
                "from datetime import datetime, timedelta",
                "from datetime import datetime, timedelta, timezone",
            )
        ]
    )
    unit = [t for t in suite_with([]) if t.startswith("tests/test_discounts.py")]
    unit.insert(3, "tests/test_discounts.py::test_naive_expiry_against_aware_now")
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_discounts.py -q",
                pytest_run(unit, verbose=False, seconds=0.12),
                description="Run the discount unit tests",
            )
        ]
    )
    s.turn(calls=[bash("git diff --stat", repo.diff_stat(), description="What changed so far")])
    s.turn(
        text="Done for the crash: the quote drops an expired coupon (as it did before #471) and the regression"
        " and unit tests cover it. Changed: app/timeutil.py (the new `as_utc()`), app/services/discounts.py"
        " (both sides of the comparison in UTC), tests/test_discounts.py, and the new (untracked, so not in the"
        " stat) tests/test_checkout_coupons.py. No migration, no new dependency. Next I'd check it on the dev"
        " server at localhost:8081.",
    )
    s.prompt(
        "Before you go on: why did nothing catch this when #471 was merged? CI was green. And is the basket page"
        " affected as well?",
        pause=(120, 300),
    )
    s.turn(
        calls=[
            bash(
                "git log --format='%h %an %ad %s' --date=short -- tests/test_discounts.py tests/test_checkout.py",
                f"{HASHES['Coupons: min_subtotal (#437)'][:7]} Priya Raman 2026-02-27 Coupons: min_subtotal (#437)\n"
                "e41c9b0 Priya Raman 2026-02-19 Coupons: percent and fixed discounts\n"
                "8a03d5e Jonas Albrecht 2026-02-11 Checkout: quote endpoint and tests",
                description="History of the coupon tests",
            )
        ]
    )
    s.turn(
        text="Three gaps lined up:\n\n"
        "1. **The unit tests pin the clock with a naive value.** `tests/test_discounts.py` passes"
        " `now=datetime(2026, 3, 1, 12, 0)` to `coupon_is_active`, so the default `utcnow()` branch, the one #471"
        " changed, never ran in tests. Naive `now` against naive `expires_at` compares fine.\n"
        "2. **No API test had a coupon with an expiry.** The `coupons` fixture in `tests/test_checkout.py` creates"
        " SAVE10 and FIVEOFF with `expires_at=None`, and `coupon.expires_at is not None` short-circuits before the"
        " comparison. In production most coupons have an expiry, so it failed at once.\n"
        "3. **The tests never touched the stored form.** The tests build `Coupon` objects in memory; nothing went"
        " through SQLite's naive DATETIME column that migration 0007 introduced.\n\n"
        "The new regression test closes gaps 2 and 3 (expired and valid coupons stored naive, through the API),"
        " and `test_naive_expiry_against_aware_now` closes gap 1.\n\n"
        "The basket page: yes. `GET /api/v1/carts/{id}/summary` calls the same `price_cart`, so it answered 500"
        " for the same coupons. Last night's log has no such crash only because the basket requests in it"
        " carried FREESHIP and STAFF20, the two coupons without an expiry; with WELCOME10 or SPRING15 the page"
        " fails the same way. The fix covers it, since the comparison itself is fixed.",
    )

    # --- the user changes direction -------------------------------------------------------------
    s.prompt(
        "Hold on. I talked to product: an expired coupon must NOT be silently dropped any more. Checkout and"
        ' quote should answer 422 with error code COUPON_EXPIRED and the message "Coupon {code} expired on'
        ' {date}." (date as YYYY-MM-DD). The mobile app 3.8 shows that message. Keep the UTC fix. The basket'
        " page (GET /carts/{id}/summary) is different, it must keep working with an expired coupon, just"
        " without the discount.\n\n"
        'Here is the part of the contract the mobile team sent (wiki page "Checkout errors, mobile 3.8"):\n\n'
        "| code | HTTP | when | app shows |\n"
        "|---|---|---|---|\n"
        "| COUPON_INVALID | 422 | code unknown or not valid for this shop | message, coupon field red |\n"
        '| COUPON_EXPIRED | 422 | coupon past its expiry date | message, coupon field red, "remove coupon" |\n'
        "| COUPON_USED_UP | 422 | max uses reached | not in 3.8 |\n"
        "| COUPON_MIN_SUBTOTAL | 422 | subtotal below the coupon's minimum | not in 3.8 |\n"
        "| OUT_OF_STOCK | 409 | a line is no longer available | message, line highlighted |\n"
        "| CART_CLOSED | 409 | cart already checked out | goes to the order page |\n"
        "| NOT_FOUND | 404 | cart or product unknown | generic error |\n\n"
        "Body, always:\n"
        '{"error": {"code": "COUPON_EXPIRED", "message": "Coupon SPRING15 expired on 2026-03-13.",'
        ' "request_id": "..."}}\n\n'
        "- `message` is shown as is, in the language of Accept-Language; the app builds no text of its own.\n"
        "- dates in messages are YYYY-MM-DD (no time, no zone); an expiry date is the UTC date.\n"
        '- 3.7 and older ignore unknown codes and show "Something went wrong"; product accepted that.'
    )
    s.turn(
        thinking="So: price_cart needs to raise for checkout/quote but stay lenient for the cart summary. Options:"
        " (a) raise in price_cart and catch it in the cart router; (b) a strict flag on price_cart; (c) a"
        " separate validate_coupon step in the checkout router before pricing. (a) uses exceptions for control"
        " flow in the lenient path and would hide a real error on the basket page. (c) looks up the coupon twice"
        " and can disagree with pricing if the clock ticks over the expiry between the two. (b) keeps one lookup"
        " and one decision. Go with a keyword-only strict=False default so the summary and every other caller"
        " keep today's behaviour. Error: CouponExpired(ShopError), 422, code COUPON_EXPIRED, key"
        " errors.coupon_expired with params code and date. Date must be YYYY-MM-DD in UTC. Used-up coupons stay"
        " silently dropped: product only spoke about expired ones.",
        text="Understood. I'll switch from dropping the coupon to raising a `CouponExpired` error (422,"
        " `COUPON_EXPIRED`) in checkout and quote, via a `strict` flag on `price_cart`; the cart summary keeps the"
        " lenient behaviour. From the contract: the body shape is the one our `ShopError` handler already"
        " produces (`code`, `message`, `request_id`), the message must come translated from Accept-Language, and"
        ' the date is the UTC date as YYYY-MM-DD. `COUPON_USED_UP` and `COUPON_MIN_SUBTOTAL` are "not in 3.8",'
        " so those cases keep today's behaviour. Let me look at the error plumbing and the i18n catalogue first.",
        calls=[
            todo(
                [
                    ("Write a failing regression test for #482", "completed"),
                    ("Compare coupon expiry in UTC regardless of naive/aware", "completed"),
                    ("Raise 422 COUPON_EXPIRED from checkout and quote", "in_progress"),
                    ("Keep GET /carts/{id}/summary lenient", "pending"),
                    ("Run pytest -x on the whole suite", "pending"),
                    ("Check on the dev server (localhost:8081)", "pending"),
                ]
            )
        ],
    )
    s.turn(calls=[repo.read("app/errors.py"), repo.read("app/i18n/__init__.py")])
    s.turn(
        text="Errors already carry a message key and parameters, and the handler translates them with the request's"
        " Accept-Language, so the new error only needs a class and a catalogue entry. Checking which existing"
        " checkout tests pin the old behaviour:",
        calls=[repo.read("tests/test_checkout.py")],
    )
    s.turn(
        text="Nothing in tests/test_checkout.py pins the old behaviour for expired coupons: the fixture coupons have"
        " no expiry, and `test_quote_unknown_coupon_is_ignored` is about unknown codes, which stay a silent drop"
        " (the contract's COUPON_INVALID is for later, product only asked for expiry). So the existing tests"
        " should pass unchanged, and the new behaviour goes into tests/test_checkout_coupons.py. The English"
        " messages for coupons:",
        calls=[repo.grep(r"coupon", "app/i18n/", glob="en.json")],
    )
    s.turn(
        text='The wording style is "Coupon {code} ..." with a full stop, so the new entry fits as product wrote it.'
        " Now the basket page router, which must stay lenient:",
        calls=[repo.read("app/routers/cart.py")],
    )
    s.turn(
        text="Adding the error class next to `InvalidCoupon`.",
        calls=[
            repo.edit(
                "app/errors.py",
                'class InvalidCoupon(ShopError):\n    status_code = 422\n    code = "COUPON_INVALID"\n',
                'class InvalidCoupon(ShopError):\n    status_code = 422\n    code = "COUPON_INVALID"\n\n\n'
                "class CouponExpired(ShopError):\n"
                '    """A coupon past its expiry date: the client shows the message (mobile app 3.8 and later)."""\n\n'
                "    status_code = 422\n"
                '    code = "COUPON_EXPIRED"\n',
            )
        ],
    )
    s.turn(
        calls=[
            repo.edit(
                "app/i18n/en.json",
                '  "errors.coupon_invalid": "Coupon {code} is not valid.",',
                '  "errors.coupon_expired": "Coupon {code} expired on {date}.",\n'
                '  "errors.coupon_invalid": "Coupon {code} is not valid.",',
            )
        ]
    )
    s.turn(
        text="Now `price_cart`. An inactive coupon can be expired or used up; only expiry gets the new error, so I"
        " need to tell them apart. I'll add `coupon_is_expired` to discounts.py and keep `coupon_is_active` for"
        " the rest.",
        calls=[
            repo.edit(
                "app/services/discounts.py",
                "def coupon_is_active(coupon: Coupon, now: datetime | None = None) -> bool:\n"
                '    """False once the coupon has expired or been used up."""\n'
                "    now = as_utc(now) if now is not None else utcnow()\n"
                "    if coupon.expires_at is not None and as_utc(coupon.expires_at) <= now:\n"
                "        return False\n",
                "def coupon_is_expired(coupon: Coupon, now: datetime | None = None) -> bool:\n"
                '    """True once the coupon\'s expiry has passed. A naive expiry is taken as UTC, which is how'
                ' migration 0007 stores it."""\n'
                "    now = as_utc(now) if now is not None else utcnow()\n"
                "    return coupon.expires_at is not None and as_utc(coupon.expires_at) <= now\n\n\n"
                "def coupon_is_active(coupon: Coupon, now: datetime | None = None) -> bool:\n"
                '    """False once the coupon has expired or been used up."""\n'
                "    if coupon_is_expired(coupon, now):\n"
                "        return False\n",
            )
        ],
    )
    s.turn(
        calls=[
            repo.edit(
                "app/services/pricing.py",
                "from app.models.cart import Cart\n"
                "from app.services import shipping, tax\n"
                "from app.services.discounts import CENT, coupon_is_active, discount_for, find_coupon",
                "from app.errors import CouponExpired\n"
                "from app.models.cart import Cart\n"
                "from app.services import shipping, tax\n"
                "from app.services.discounts import CENT, coupon_is_active, coupon_is_expired, discount_for,"
                " find_coupon",
            ),
        ]
    )
    pricing = repo.files["app/services/pricing.py"]
    branch = "        elif not coupon_is_active(coupon):\n"
    old = pricing[pricing.index("def price_cart(") : pricing.index(branch) + len(branch)]
    new = old.replace(
        "def price_cart(db: Session, cart: Cart, coupon_code: str | None = None) -> Quote:\n"
        '    """The quote for `cart`; an unknown or inactive coupon is left out (and logged)."""\n',
        "def price_cart(db: Session, cart: Cart, coupon_code: str | None = None, *, strict: bool = False) -> Quote:\n"
        '    """The quote for `cart`; an unknown or inactive coupon is left out (and logged).\n\n'
        "    With `strict` (checkout and quote) an expired coupon raises CouponExpired instead (#482).\n"
        '    """\n',
    ).replace(
        branch,
        "        elif strict and coupon_is_expired(coupon):\n"
        '            raise CouponExpired("errors.coupon_expired", code=coupon.code, date=coupon.expires_at)\n' + branch,
    )
    s.turn(calls=[repo.edit("app/services/pricing.py", old, new)])
    s.turn(
        text="Both checkout endpoints get `strict=True`; the cart summary keeps the default.",
        calls=[
            repo.edit(
                "app/routers/checkout.py",
                "price_cart(db, cart, body.coupon_code)",
                "price_cart(db, cart, body.coupon_code, strict=True)",
                replace_all=True,
            )
        ],
    )
    s.turn(
        text="Updating the regression test to the new contract: quote and checkout both get 422 with the code and"
        " the exact message, checkout must leave the cart open, a valid coupon still applies, and the basket"
        " page ignores the expired coupon with a 200.",
        calls=[repo.write("tests/test_checkout_coupons.py", TEST_V2)],
    )
    new_tests = [
        "tests/test_checkout_coupons.py::test_quote_with_expired_coupon_is_422",
        "tests/test_checkout_coupons.py::test_checkout_with_expired_coupon_is_422",
        "tests/test_checkout_coupons.py::test_quote_with_valid_coupon_applies_it",
        "tests/test_checkout_coupons.py::test_cart_summary_ignores_expired_coupon",
    ]
    failure, reason = _failure_date(repo, s.clock)
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_checkout_coupons.py",
                pytest_run(new_tests, verbose=False, seconds=0.93, failed=new_tests[0], failure=failure, reason=reason),
                code=1,
                description="Run the coupon tests",
            )
        ]
    )
    s.turn(
        thinking="The message has the whole datetime, because str.format puts str(datetime) into {date}. The"
        " contract says YYYY-MM-DD, the UTC date. Where to format? In the catalogue ({date:%Y-%m-%d}) would work"
        " for datetime values but makes every translation repeat the format and breaks if someone passes a"
        " string. Format once where the error is raised: as_utc(expires_at).date().isoformat(). The stored value"
        " is naive UTC, so as_utc keeps the date as stored: 2026-03-13 00:00:00 stays 2026-03-13, it does not"
        " move to the 12th as a local-time conversion would.",
        text="The message gets the full datetime; the spec says YYYY-MM-DD. Formatting the date in UTC where the"
        " error is raised.",
        calls=[
            repo.edit(
                "app/services/pricing.py",
                'raise CouponExpired("errors.coupon_expired", code=coupon.code, date=coupon.expires_at)',
                "expired_on = as_utc(coupon.expires_at).date().isoformat()  # type: ignore[arg-type]\n"
                '            raise CouponExpired("errors.coupon_expired", code=coupon.code, date=expired_on)',
            )
        ],
    )
    s.turn(
        calls=[
            repo.edit(
                "app/services/pricing.py",
                "discount_for, find_coupon\n",
                "discount_for, find_coupon\nfrom app.timeutil import as_utc\n",
            )
        ]
    )
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_checkout_coupons.py",
                pytest_run(new_tests, verbose=False, seconds=0.88),
                description="Re-run the coupon tests",
            )
        ]
    )
    full = suite_with([*new_tests, "tests/test_discounts.py::test_naive_expiry_against_aware_now"])
    full.remove("tests/test_discounts.py::test_naive_expiry_against_aware_now")
    full.insert(full.index("tests/test_discounts.py::test_used_up_coupon_is_inactive"), unit[3])
    s.turn(
        text="All four pass. The whole suite, to see whether any existing test relied on the silent drop:",
        calls=[
            bash(
                "pytest -x -q",
                pytest_run(full, verbose=False, seconds=4.02),
                description="Run the full test suite",
            )
        ],
    )
    s.turn(
        thinking="Things to verify by hand on the running app, since TestClient skips the real server stack:\n"
        "- an expired coupon on /checkout/quote gives 422 with code COUPON_EXPIRED and the exact English message;\n"
        "- a valid coupon still gives 200 with the discount;\n"
        "- the basket page with the expired coupon gives 200 and no discount;\n"
        "- the request id header and the request_id in the error body match (the middleware runs for real).\n"
        "The dev database has SPRING15 (expired yesterday, 2026-03-13) and WELCOME10 (valid until June). Port 8081"
        " per the rules; 8080 is the payments mock, leave it alone.",
        text="Green. Now a manual check on the dev server, on localhost:8081 as required. Nothing is listening there"
        " yet?",
        calls=[
            bash(
                "curl -s -o /dev/null -w '%{http_code}\\n' http://localhost:8081/api/v1/health",
                "000",
                code=7,
                description="Is port 8081 free",
            )
        ],
    )
    s.turn(
        text="Port 8081 is free (curl exit code 7: connection refused). Starting the server.",
        calls=[
            bash(
                "uvicorn app.main:app --host 127.0.0.1 --port 8081",
                "Command running in background with ID: 4f7d2c",
                description="Start the dev server on port 8081",
                run_in_background=True,
            )
        ],
    )
    started = s.clock + timedelta(seconds=1.4)
    s.turn(
        calls=[
            Call(
                name="BashOutput",
                input={"bash_id": "4f7d2c"},
                content="<status>running</status>\n\n<stderr>\n"
                "INFO:     Started server process [48213]\nINFO:     Waiting for application startup.\n"
                f"{started:%Y-%m-%d %H:%M:%S},{started.microsecond // 1000:03d} INFO  shop.main shop-api ready"
                " (env=dev)\n"
                "INFO:     Application startup complete.\n"
                "INFO:     Uvicorn running on http://127.0.0.1:8081 (Press CTRL+C to quit)\n</stderr>\n\n"
                f"<timestamp>{iso(s.clock + timedelta(seconds=9))}</timestamp>",
                result={
                    "shellId": "4f7d2c",
                    "command": "uvicorn app.main:app --host 127.0.0.1 --port 8081",
                    "status": "running",
                    "exitCode": None,
                    "stdout": "",
                    "stderr": "(see content)",
                },
            )
        ]
    )
    http_date = (s.clock + timedelta(seconds=20)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    s.turn(
        text="Server is up. The dev database has the coupons from the issue (SPRING15 expired on 2026-03-13,"
        " WELCOME10 valid). Trying both in parallel:",
        calls=[
            bash(
                "curl -s -i -X POST http://localhost:8081/api/v1/checkout/quote -H 'Content-Type: application/json'"
                ' -d \'{"cart_id": "cart-5c09e1d7", "coupon_code": "SPRING15"}\'',
                f"HTTP/1.1 422 Unprocessable Entity\ndate: {http_date}\nserver: uvicorn\n"
                "content-length: 138\ncontent-type: application/json\nx-request-id: 6c1e9a0f42b7\n\n"
                '{"error":{"code":"COUPON_EXPIRED","message":"Coupon SPRING15 expired on 2026-03-13.",'
                '"request_id":"6c1e9a0f42b7"}}',
                description="Quote with an expired coupon",
            ),
            bash(
                "curl -s -i -X POST http://localhost:8081/api/v1/checkout/quote -H 'Content-Type: application/json'"
                ' -d \'{"cart_id": "cart-5c09e1d7", "coupon_code": "WELCOME10"}\'',
                f"HTTP/1.1 200 OK\ndate: {http_date}\nserver: uvicorn\ncontent-length: 131\n"
                "content-type: application/json\nx-request-id: 0d8b3f57c21e\n\n"
                '{"subtotal":"74.50","discount":"7.45","shipping":"0.00","tax":"12.74","total":"79.79",'
                '"currency":"EUR","coupon_code":"WELCOME10"}',
                description="Quote with a valid coupon",
            ),
        ],
    )
    s.turn(
        text='Both as specified: SPRING15 gives 422 `COUPON_EXPIRED` with "Coupon SPRING15 expired on'
        ' 2026-03-13." and the `request_id` matches the `x-request-id` header; WELCOME10 gives 200 with a 10%'
        " discount of 7.45 on 74.50. Now the basket page with the expired coupon:",
        calls=[
            bash(
                "curl -s 'http://localhost:8081/api/v1/carts/cart-5c09e1d7/summary?coupon=SPRING15' | python -m"
                " json.tool",
                json.dumps(
                    {
                        "cart_id": "cart-5c09e1d7",
                        "lines": [
                            {"sku": "KTL-220", "name": "Gooseneck kettle", "quantity": 1, "unit_price": "64.00"},
                            {"sku": "TEA-014", "name": "Sencha 100 g", "quantity": 1, "unit_price": "8.50"},
                            {"sku": "CUP-007", "name": "Tasting cup", "quantity": 1, "unit_price": "2.00"},
                        ],
                        "quote": {
                            "subtotal": "74.50",
                            "discount": "0.00",
                            "shipping": "0.00",
                            "tax": "14.16",
                            "total": "88.66",
                            "currency": "EUR",
                            "coupon_code": None,
                        },
                    },
                    indent=4,
                ),
                description="Basket page with the expired coupon",
            )
        ],
    )

    # --- a request in Chinese -----------------------------------------------------------------------
    s.prompt(
        "很好。另外请给这个新错误加一条中文提示，写在 app/i18n/zh_CN.json 里，"
        "文案用「优惠券 {code} 已于 {date} 过期」。德语先不用管，会回退到英文。还是不要动 migrations 目录。",
        pause=(600, 1500),
    )
    s.turn(
        text="好的。I'll add `errors.coupon_expired` to app/i18n/zh_CN.json with that wording; German falls back to"
        " English through `translate`. Reading the catalogue first.",
        calls=[repo.read("app/i18n/zh_CN.json")],
    )
    s.turn(
        thinking="zh_CN.json is a flat catalogue of dotted keys, sorted, two-space indent, Chinese full-width"
        ' punctuation mostly left out of short messages ("优惠券 {code} 无效"). The user\'s wording uses the same'
        " placeholders as English, {code} and {date}, and test_placeholders_match_english compares exactly those"
        " sets, so the wording can go in as given, without the 「」 quotes, which were only quoting the text in the"
        " request. {date} stays YYYY-MM-DD: the mobile contract says dates are shown as is, and Chinese readers"
        " read ISO dates fine. German: translate() falls back to en for a missing key, and the user said not to"
        " bother: catalogue(locale).get(key) misses, and the English text is used.",
        calls=[
            repo.edit(
                "app/i18n/zh_CN.json",
                '  "errors.coupon_invalid": "优惠券 {code} 无效",',
                '  "errors.coupon_invalid": "优惠券 {code} 无效",\n'
                '  "errors.coupon_expired": "优惠券 {code} 已于 {date} 过期",',
            )
        ],
    )
    i18n_tests = [t for t in suite_with([]) if t.startswith("tests/test_i18n.py")]
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_i18n.py -q",
                pytest_run(
                    i18n_tests,
                    verbose=False,
                    seconds=0.09,
                    failed="tests/test_i18n.py::test_locale_files_are_sorted[zh_CN]",
                    failure=_failure_sorted(repo),
                    reason="AssertionError: zh_CN.json keys are not sorted",
                ),
                code=1,
                description="Run the i18n tests",
            )
        ]
    )
    s.turn(
        text="A test I hadn't read yet: the catalogues must stay sorted by key, and I put the new line after"
        ' `errors.coupon_invalid` ("expired" sorts before "invalid"). Moving it before.',
        calls=[
            repo.edit(
                "app/i18n/zh_CN.json",
                '  "errors.coupon_invalid": "优惠券 {code} 无效",\n'
                '  "errors.coupon_expired": "优惠券 {code} 已于 {date} 过期",',
                '  "errors.coupon_expired": "优惠券 {code} 已于 {date} 过期",\n'
                '  "errors.coupon_invalid": "优惠券 {code} 无效",',
            )
        ],
    )
    s.turn(
        calls=[
            bash(
                "pytest -x tests/test_i18n.py -q",
                pytest_run(i18n_tests, verbose=False, seconds=0.08),
                description="Re-run the i18n tests",
            )
        ]
    )
    s.turn(
        text="The i18n tests pass. Adding a test for the Chinese message through the API (`Accept-Language:"
        " zh-CN,zh;q=0.9`, what the mobile app sends on a Chinese phone), so the catalogue entry and the locale"
        " picking are covered together.",
        calls=[
            repo.edit(
                "tests/test_checkout_coupons.py",
                "def test_quote_with_valid_coupon_applies_it(",
                CHINESE_TEST + "\n\ndef test_quote_with_valid_coupon_applies_it(",
            )
        ],
    )
    s.turn(
        calls=[
            bash(
                "curl -s -X POST http://localhost:8081/api/v1/checkout/quote -H 'Content-Type: application/json'"
                ' -H \'Accept-Language: zh-CN\' -d \'{"cart_id": "cart-5c09e1d7", "coupon_code": "SPRING15"}\'',
                '{"error":{"code":"COUPON_EXPIRED","message":"Coupon SPRING15 expired on 2026-03-13.",'
                '"request_id":"91aa04c3e5d8"}}',
                description="Chinese message on the running server",
            )
        ]
    )
    s.turn(
        thinking="Still English: the server was started before the edit and `catalogue` is cached with"
        " functools.cache; uvicorn runs without --reload. Restart it. The test suite did not notice because every"
        " TestClient builds a new app but the cache is module-level and the test process reads the files after"
        " the edit anyway. In production a deploy restarts the workers, so this only bites during development;"
        " worth a line in the summary.",
        text="Still English because the server started before the edit and the catalogues are cached. Restarting it.",
        calls=[
            Call(
                name="KillShell",
                input={"shell_id": "4f7d2c"},
                content='{"success":true,"message":"Successfully killed shell: 4f7d2c (uvicorn app.main:app --host'
                ' 127.0.0.1 --port 8081)","shell_id":"4f7d2c"}',
                result={"success": True, "message": "Successfully killed shell: 4f7d2c", "shell_id": "4f7d2c"},
            )
        ],
    )
    s.turn(
        calls=[
            bash(
                "uvicorn app.main:app --host 127.0.0.1 --port 8081 & sleep 2; curl -s -X POST"
                " http://localhost:8081/api/v1/checkout/quote -H 'Content-Type: application/json'"
                ' -H \'Accept-Language: zh-CN\' -d \'{"cart_id": "cart-5c09e1d7", "coupon_code": "SPRING15"}\';'
                " kill %1",
                "INFO:     Started server process [48377]\nINFO:     Waiting for application startup.\n"
                "INFO:     Application startup complete.\n"
                "INFO:     Uvicorn running on http://127.0.0.1:8081 (Press CTRL+C to quit)\n"
                'INFO:     127.0.0.1:53118 - "POST /api/v1/checkout/quote HTTP/1.1" 422 Unprocessable Entity\n'
                '{"error":{"code":"COUPON_EXPIRED","message":"优惠券 SPRING15 已于 2026-03-13 过期",'
                '"request_id":"2f60b8d91c4a"}}\nINFO:     Shutting down\nINFO:     Finished server process [48377]',
                description="Restart the server and ask in Chinese",
            )
        ]
    )
    new_tests.insert(2, "tests/test_checkout_coupons.py::test_expired_coupon_message_in_chinese")
    final = suite_with([*new_tests, unit[3]])
    final.remove(unit[3])
    final.insert(final.index("tests/test_discounts.py::test_used_up_coupon_is_inactive"), unit[3])
    s.turn(
        text='With `Accept-Language: zh-CN` the running server now answers "优惠券 SPRING15 已于 2026-03-13 过期",'
        " still 422 `COUPON_EXPIRED`, so the app shows the Chinese text as it is; the server is stopped again."
        " Full suite, then lint.",
        calls=[
            bash(
                "pytest -x -q",
                pytest_run(final, verbose=False, seconds=4.26),
                description="Run the full test suite",
            )
        ],
    )
    s.turn(
        calls=[bash("ruff check app tests && ruff format --check app tests", _ruff(repo), code=1, description="Lint")]
    )
    s.turn(
        thinking="E501 in app/services/discounts.py: the one-line docstring I gave coupon_is_expired is 122"
        " characters. ruff format does not wrap docstrings, so split it by hand: a summary line, then the note"
        " about naive values as the body, the style the other modules use for longer docstrings.",
        text="One docstring of mine is two characters too long; splitting it.",
        calls=[
            repo.edit(
                "app/services/discounts.py",
                '    """True once the coupon\'s expiry has passed. A naive expiry is taken as UTC, which is how'
                ' migration 0007 stores it."""\n',
                '    """True once the coupon\'s expiry has passed.\n\n'
                "    A naive expiry is taken as UTC, which is how migration 0007 stores it.\n"
                '    """\n',
            )
        ],
    )
    s.turn(
        calls=[
            bash(
                "ruff check app tests && ruff format --check app tests && mypy app",
                "All checks passed!\n52 files already formatted\nSuccess: no issues found in 31 source files",
                description="Lint and type-check",
            )
        ]
    )
    s.turn(
        text="Lint, format and types are clean. One more full run, since the docstring edit touched discounts.py:",
        calls=[
            bash("pytest -x -q", pytest_run(final, verbose=False, seconds=4.11), description="Test run after lint"),
        ],
    )
    s.turn(
        thinking="Before handing over: the working tree should hold only the files this fix needs. Expected:"
        " app/timeutil.py, app/services/discounts.py, app/services/pricing.py, app/routers/checkout.py,"
        " app/errors.py, the two catalogues, tests/test_discounts.py and the new tests/test_checkout_coupons.py."
        " Nothing under migrations/, no stray files from the manual checks (the curl output went to the"
        " terminal, the server wrote no files), no debug prints left in.",
        text="migrations/ is untouched. What changed:",
        calls=[bash("git status --short", _status(repo), description="Changed files")],
    )
    s.turn(
        text="Ready for review. Where things stand:\n\n"
        "- **Root cause:** #471 made `utcnow()` aware while `coupons.expires_at` is stored naive (migration 0007);"
        " `coupon_is_active` compared them and raised, so checkout, quote and the basket page answered 500 for"
        " every coupon with an expiry.\n"
        "- **Fix:** `as_utc()` in app/timeutil.py; both sides of the expiry comparison are aware UTC now.\n"
        '- **New behaviour (product):** quote and checkout answer 422 `COUPON_EXPIRED` with "Coupon {code} expired'
        ' on {date}." (UTC date, YYYY-MM-DD), through the normal error handler, so `request_id` is in the body;'
        " the basket page still leaves an expired coupon out; used-up coupons are unchanged (not in the 3.8"
        " contract).\n"
        "- **i18n:** `errors.coupon_expired` in en.json and zh_CN.json; German falls back to English.\n"
        "- **Tests:** tests/test_checkout_coupons.py (expired and valid coupons stored naive, through the API, in"
        " English and Chinese, and the basket page) and a unit test for a naive expiry against an aware now.\n\n"
        "`pytest -x` passes, ruff and mypy are clean, and the dev server on localhost:8081 answers as the mobile"
        " contract says. migrations/ is untouched and nothing is committed.\n\n"
        "How I checked by hand: `curl` against localhost:8081 with SPRING15 (expired 2026-03-13) gave 422 with"
        " the English message and, with `Accept-Language: zh-CN`, the Chinese one; WELCOME10 gave 200 with 7.45"
        " off 74.50; the basket page with SPRING15 gave 200 without a discount.\n\n"
        "One question for product, not blocking: the basket page now silently shows no discount for an expired"
        " coupon, as you asked. The web shop might want to say why (the same message as a hint, with status 200)."
        " That would be a small addition to the summary response, say if you want it.",
    )
    s.prompt(
        "Jonas had a look at the diff. Four comments, the last one a question:\n"
        "1. pricing.py: no `# type: ignore` in app/ please, narrow the Optional instead:\n"
        "   `expired_on = as_utc(coupon.expires_at).date().isoformat()  # type: ignore[arg-type]`\n"
        "2. test_checkout_coupons.py: `yesterday()` computes the date again at assert time. If the suite runs"
        " across midnight UTC the expected date is off by one. Take the date from the coupon you stored.\n"
        "3. Log the rejection at INFO like the other coupon branches in price_cart, with the cart id, so support"
        " can find it by request id. Support gets these tickets first and greps the logs for the cart id the"
        " customer sends them; without a line they only see the 422 in the access log.\n"
        "4. Question, no change needed: why not a TypeDecorator on Coupon.expires_at that returns aware UTC?"
        " Then nobody could make this mistake again.\n"
        "He is fine with the strict flag, and with leaving used-up coupons as they are until the app handles"
        " COUPON_USED_UP.\n"
        "Fix those and show me the final diff.",
        pause=(1800, 3000),
    )
    s.turn(
        thinking="1 and 3 touch the same branch of price_cart: check `coupon.expires_at is not None` in the elif so"
        " mypy narrows it, then log and raise. For 2, add_coupon should return the naive datetime it stored; the"
        " tests take `.date().isoformat()` from it, which is the UTC date because the stored value is UTC. Then"
        " yesterday() has no users and goes. Jonas is right about the flake: add_coupon runs at 23:59:59.9 UTC,"
        " the request and the assert run after midnight, and yesterday() then names the day the coupon did not"
        " expire on. Taking the date from the stored value removes the second clock read entirely. The log line:"
        " the other branches say 'cart %s: unknown coupon %r' and 'cart %s: coupon %s is no longer active', so"
        " 'cart %s: coupon %s expired on %s, rejected' fits, and the request id is added by the logging filter."
        " Re-read both files first, they changed several times.",
        text="All fair. On 4: a TypeDecorator is the better long-term fix, and I considered it first. I held back"
        " because it changes what every reader of `Coupon.expires_at` gets (the admin CSV export and the"
        " nightly report format it and would start printing `+00:00`), and because it sits next to the schema,"
        " which the DBA reviews together with migrations/. For a hotfix, `as_utc()` at the one comparison is the"
        " smallest change that is obviously right; I listed the TypeDecorator as a follow-up. Now 1 to 3,"
        " re-reading the two files as they are now.",
        calls=[repo.read("app/services/pricing.py"), repo.read("tests/test_checkout_coupons.py")],
    )
    s.turn(
        text="Comments 1 and 3 are one change in `price_cart`: checking `coupon.expires_at is not None` in the same"
        " `elif` lets mypy narrow the Optional (`coupon_is_expired` already implies it, but mypy cannot see through"
        " the call), and the log line goes right before the raise, worded like the other branches.",
        calls=[
            repo.edit(
                "app/services/pricing.py",
                "        elif strict and coupon_is_expired(coupon):\n"
                "            expired_on = as_utc(coupon.expires_at).date().isoformat()  # type: ignore[arg-type]\n",
                "        elif strict and coupon.expires_at is not None and coupon_is_expired(coupon):\n"
                "            expired_on = as_utc(coupon.expires_at).date().isoformat()\n"
                '            log.info("cart %s: coupon %s expired on %s, rejected", cart.id, coupon.code,'
                " expired_on)\n",
            )
        ],
    )
    s.turn(
        text="Now comment 2: `add_coupon` returns what it stored, and the expected dates come from it, so the"
        " test reads the clock once, when it creates the coupon, and the assert can no longer disagree with it.",
        calls=[
            repo.edit(
                "tests/test_checkout_coupons.py",
                "    db.commit()\n\n\ndef yesterday():\n    return (utcnow() - timedelta(days=1)).date().isoformat()\n",
                "    db.commit()\n    return expires\n",
            )
        ],
    )
    s.turn(
        calls=[
            repo.edit(
                "tests/test_checkout_coupons.py",
                '    add_coupon(db, "OLD10", timedelta(days=-1))\n'
                '    r = client.post("/api/v1/checkout/quote", json={"cart_id": cart.id, "coupon_code": "OLD10"})\n'
                "    assert r.status_code == 422\n"
                '    error = r.json()["error"]\n'
                '    assert error["code"] == "COUPON_EXPIRED"\n'
                '    assert error["message"] == f"Coupon OLD10 expired on {yesterday()}."\n',
                '    expires = add_coupon(db, "OLD10", timedelta(days=-1))\n'
                '    r = client.post("/api/v1/checkout/quote", json={"cart_id": cart.id, "coupon_code": "OLD10"})\n'
                "    assert r.status_code == 422\n"
                '    error = r.json()["error"]\n'
                '    assert error["code"] == "COUPON_EXPIRED"\n'
                '    assert error["message"] == f"Coupon OLD10 expired on {expires.date().isoformat()}."\n',
            ),
            repo.edit(
                "tests/test_checkout_coupons.py",
                CHINESE_TEST,
                CHINESE_TEST.replace('    add_coupon(db, "OLD10"', '    expires = add_coupon(db, "OLD10"').replace(
                    "{yesterday()}", "{expires.date().isoformat()}"
                ),
            ),
        ],
    )
    coupon_tests = [t for t in final if t.startswith("tests/test_checkout_coupons.py")]
    s.turn(
        text="The coupon tests first, verbose, to see each of them by name:",
        calls=[
            bash(
                "pytest -x -v tests/test_checkout_coupons.py",
                pytest_run(coupon_tests, verbose=True, seconds=0.97),
                description="Run the coupon tests",
            )
        ],
    )
    s.turn(
        thinking="Five tests, in file order: quote 422, checkout 422, the Chinese message, the valid coupon, the"
        " basket page. All green, and the two that assert a date now take it from add_coupon. The whole suite"
        " next, verbose, because the user will want to see the complete list once before the merge request.",
        text="All five pass with the dates taken from the stored coupons, including the Chinese message. Now the"
        " whole suite, verbose, so the run shows every test by name for the record.",
        calls=[
            bash(
                "pytest -x -v",
                pytest_run(final, verbose=True, seconds=4.19),
                description="Run the full test suite",
            )
        ],
    )
    s.turn(
        calls=[
            bash(
                "ruff check app tests && ruff format --check app tests && mypy app",
                "All checks passed!\n52 files already formatted\nSuccess: no issues found in 31 source files",
                description="Lint and type-check",
            )
        ]
    )
    s.turn(
        thinking="Last look before the diff: the review asked for three changes and a question. 1: the type"
        " ignore is gone and mypy passes, so the narrowing works. 2: yesterday() is gone, both date assertions use"
        " the stored expiry. 3: the log line is in the strict branch. 4: answered. The diff should show exactly"
        " that on top of what Jonas saw. git diff does not show untracked files, so add the new test file with"
        " intent-to-add (git add -N); that stages nothing and commits nothing.",
        text="All green: the full suite passes with `pytest -x`, including the five coupon tests with the dates"
        " taken from the stored expiry, and mypy is happy without the ignore, so the narrowing is real. Nothing"
        " else changed since the review, migrations/ is still untouched. The final diff:",
        calls=[
            bash(
                "git add -N tests/test_checkout_coupons.py && git diff --stat && git diff",
                repo.diff_stat(new_files=True) + "\n" + repo.diff(new_files=True),
                description="Show the whole diff, the new test file included",
            )
        ],
    )
    s.turn(
        thinking="Wrap up for the user: cause with the commit hash, each changed file in one line, what was checked"
        " and how, the review changes, and the one operational surprise (the cached catalogues need a restart)."
        " Mention the constraints were kept: migrations/ untouched, pytest -x used throughout, dev server on"
        " 8081, no new dependencies, nothing committed. Test count from the last run.",
        text=f"""Issue #482 is fixed (not committed, as you asked).

**Cause.** Commit {BAD[:7]} (#471) made `utcnow()` timezone-aware, while `coupons.expires_at` is stored naive \
since migration 0007. `coupon_is_active` compared the two, so any coupon with an expiry raised \
`TypeError: can't compare offset-naive and offset-aware datetimes` and checkout/quote answered 500 (Sentry event \
{SENTRY_EVENT}).

**Changes**
- `app/timeutil.py`: `as_utc()` takes a naive value as UTC; used on both sides of the expiry comparison.
- `app/services/discounts.py`: new `coupon_is_expired()`; `coupon_is_active()` uses it.
- `app/errors.py`: `CouponExpired` (422, `COUPON_EXPIRED`).
- `app/services/pricing.py`: `price_cart(..., strict=True)` raises `CouponExpired` with the date as YYYY-MM-DD; \
without `strict` an expired coupon is still dropped.
- `app/routers/checkout.py`: quote and checkout use `strict=True`; `GET /carts/{{id}}/summary` stays lenient.
- `app/i18n/en.json`, `app/i18n/zh_CN.json`: `errors.coupon_expired` ("Coupon {{code}} expired on {{date}}." / \
"优惠券 {{code}} 已于 {{date}} 过期"); German falls back to English.
- Tests: `tests/test_checkout_coupons.py` (new, 5 tests) and `test_naive_expiry_against_aware_now`.

**Checked:** `pytest -x` ({len(final)} passed), ruff and mypy clean, and by hand on localhost:8081 (422 with \
the English and the Chinese message, 200 with a valid coupon, basket page still 200). migrations/ untouched, no \
new dependencies.

**Review (Jonas):** the Optional is narrowed instead of a type ignore, the rejection is logged at INFO with \
the cart id, and the tests take the expected date from the stored coupon, so they cannot flake at midnight UTC.

**Worth knowing:** the catalogues are cached, so a running server needs a restart after editing app/i18n/*.json.

**Follow-ups I did not do** (out of scope, say if you want them):
- a SQLAlchemy type that returns `expires_at` as aware UTC, so no caller can compare naive values again; it \
belongs with a schema review, next to migrations/ that I left alone;
- `COUPON_USED_UP` once the app handles it (the contract lists it as "not in 3.8");
- the German text for `errors.coupon_expired`, which falls back to English for now.""",
    )
    s.prompt(
        "Thanks, looks good. Write the merge request description for me, I'll paste it into GitLab. Our template:\n\n"
        "## What\n(one paragraph: the change as the user of the API sees it)\n"
        "## Why\n(the cause, with the commit)\n"
        "## How to test\n(commands)\n"
        "## Risk\n(what could break, who is affected)\n"
        "## Links\n(issue, Sentry, docs)\n\n"
        "Keep it short, the reviewers know the code.",
        pause=(300, 900),
    )
    s.turn(
        text=f"""## What
Checkout and quote no longer crash on coupons with an expiry date. An expired coupon now gets \
`422 COUPON_EXPIRED` with "Coupon {{code}} expired on {{date}}." (en) / "优惠券 {{code}} 已于 {{date}} 过期" (zh_CN), \
as in the mobile 3.8 error contract. The basket page (`GET /api/v1/carts/{{id}}/summary`) keeps ignoring an \
expired coupon.

## Why
Since {BAD[:7]} (#471) `utcnow()` is timezone-aware, but `coupons.expires_at` is stored naive (UTC) since \
migration 0007. `coupon_is_active` compared the two and raised `TypeError: can't compare offset-naive and \
offset-aware datetimes`, so every coupon with an expiry gave a 500 (Sentry event {SENTRY_EVENT}).

## How to test
- `pytest -x` (new: `tests/test_checkout_coupons.py`, `test_naive_expiry_against_aware_now`)
- `uvicorn app.main:app --port 8081`, then `POST http://localhost:8081/api/v1/checkout/quote` with an expired \
coupon: 422 and the message; with `Accept-Language: zh-CN` the Chinese one; a valid coupon: 200 with the discount.

## Risk
Low. No schema change, migrations/ untouched. Apps older than 3.8 show their generic error for the new 422 \
(accepted by product). Used-up coupons behave as before.

## Links
- Issue: {ISSUE_URL}
- Sentry: {SENTRY_URL}""",
    )
    return s.dump("Fix 500 at checkout with expired coupons (#482)")


# --- the outputs the story quotes ------------------------------------------------------------


CHINESE_TEST = """def test_expired_coupon_message_in_chinese(client, db, cart):
    add_coupon(db, "OLD10", timedelta(days=-1))
    r = client.post(
        "/api/v1/checkout/quote",
        json={"cart_id": cart.id, "coupon_code": "OLD10"},
        headers={"Accept-Language": "zh-CN,zh;q=0.9"},
    )
    assert r.status_code == 422
    assert r.json()["error"]["message"] == f"优惠券 OLD10 已于 {yesterday()} 过期"
"""

TEST_V1 = r'''"""Checkout with coupons that expired or are about to (#482)."""

from datetime import timedelta
from decimal import Decimal

from app.models.coupon import Coupon, CouponKind
from app.timeutil import utcnow


def add_coupon(db, code, expires_in):
    # naive UTC, the way the coupons table stores it since migration 0007
    expires = (utcnow() + expires_in).replace(tzinfo=None)
    db.add(Coupon(code=code, kind=CouponKind.PERCENT, value=Decimal("10"), expires_at=expires))
    db.commit()


def test_quote_with_expired_coupon_does_not_crash(client, db, cart):
    add_coupon(db, "OLD10", timedelta(days=-1))
    r = client.post("/api/v1/checkout/quote", json={"cart_id": cart.id, "coupon_code": "OLD10"})
    assert r.status_code == 200
    assert r.json()["coupon_code"] is None


def test_quote_with_valid_coupon_applies_it(client, db, cart):
    add_coupon(db, "NEW10", timedelta(days=3))
    r = client.post("/api/v1/checkout/quote", json={"cart_id": cart.id, "coupon_code": "NEW10"})
    assert r.status_code == 200
    body = r.json()
    assert body["coupon_code"] == "NEW10"
    assert Decimal(body["discount"]) == Decimal("4.20")
'''

TEST_V2 = r'''"""Checkout with coupons that expired or are about to (#482).

Expired coupons: checkout and quote answer 422 COUPON_EXPIRED; the basket page just leaves them out.
"""

from datetime import timedelta
from decimal import Decimal

from app.models.coupon import Coupon, CouponKind
from app.timeutil import utcnow


def add_coupon(db, code, expires_in):
    # naive UTC, the way the coupons table stores it since migration 0007
    expires = (utcnow() + expires_in).replace(tzinfo=None)
    db.add(Coupon(code=code, kind=CouponKind.PERCENT, value=Decimal("10"), expires_at=expires))
    db.commit()


def yesterday():
    return (utcnow() - timedelta(days=1)).date().isoformat()


def test_quote_with_expired_coupon_is_422(client, db, cart):
    add_coupon(db, "OLD10", timedelta(days=-1))
    r = client.post("/api/v1/checkout/quote", json={"cart_id": cart.id, "coupon_code": "OLD10"})
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "COUPON_EXPIRED"
    assert error["message"] == f"Coupon OLD10 expired on {yesterday()}."


def test_checkout_with_expired_coupon_is_422(client, db, cart):
    add_coupon(db, "OLD10", timedelta(days=-1))
    r = client.post("/api/v1/checkout", json={"cart_id": cart.id, "coupon_code": "OLD10"})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "COUPON_EXPIRED"
    assert not cart.closed


def test_quote_with_valid_coupon_applies_it(client, db, cart):
    add_coupon(db, "NEW10", timedelta(days=3))
    r = client.post("/api/v1/checkout/quote", json={"cart_id": cart.id, "coupon_code": "NEW10"})
    assert r.status_code == 200
    body = r.json()
    assert body["coupon_code"] == "NEW10"
    assert Decimal(body["discount"]) == Decimal("4.20")


def test_cart_summary_ignores_expired_coupon(client, db, cart):
    add_coupon(db, "OLD10", timedelta(days=-1))
    r = client.get(f"/api/v1/carts/{cart.id}/summary", params={"coupon": "OLD10"})
    assert r.status_code == 200
    assert r.json()["quote"]["coupon_code"] is None
    assert Decimal(r.json()["quote"]["discount"]) == Decimal("0.00")
'''


def _log_listing(log: str) -> str:
    lines, size = log.count("\n"), len(log.encode())
    return (
        f"  {lines} var/log/shop-api.log\n"
        "total 1712\n"
        "drwxr-xr-x 2 dev dev    4096 Mar 14 06:25 .\n"
        "drwxr-xr-x 5 dev dev    4096 Mar  2 11:07 ..\n"
        f"-rw-r--r-- 1 dev dev {size:7d} Mar 14 08:59 shop-api.log\n"
        "-rw-r--r-- 1 dev dev  963410 Mar 13 06:25 shop-api.log.1\n"
        "-rw-r--r-- 1 dev dev  641177 Mar 12 06:25 shop-api.log.2.gz\n"
    )


def _blame(repo: Repo) -> str:
    start = repo.line_of("app/services/discounts.py", "def coupon_is_active")
    lines = repo.files["app/services/discounts.py"].split("\n")[start - 1 : start + 8]
    first = ("e41c9b0", "2026-02-19 14:20:37")  # "Coupons: percent and fixed discounts"
    later = (HASHES["Coupons: min_subtotal (#437)"][:7], "2026-02-27 11:05:12")  # it made the check inclusive
    out = []
    for i, line in enumerate(lines):
        h, when = later if i == 3 else first
        out.append(f"{h} (Priya Raman {when} +0100 {start + i:3d}) {line}")
    return "\n".join(out) + "\n"


SEP = " ".join("_" * 40)  # the line pytest draws between the frames of a traceback


def _failure_api(repo: Repo, now: datetime) -> str:
    test = "tests/test_checkout_coupons.py"
    test_line = repo.line_of(test, 'r = client.post("/api/v1/checkout/quote"')
    cmp_line = repo.line_of("app/services/discounts.py", "coupon.expires_at <= now")
    call_line = repo.line_of("app/services/pricing.py", "elif not coupon_is_active(coupon)")
    quote_line = repo.line_of("app/routers/checkout.py", "return QuoteOut.from_quote")
    log_line = repo.line_of("app/errors.py", "log.exception(")
    stamp = f"{now.year}, {now.month}, {now.day}, {now.hour}, {now.minute}, {now.second}, {now.microsecond}"
    site = ".venv/lib/python3.11/site-packages"
    return f"""
client = <starlette.testclient.TestClient object at 0x7f3a91c2d250>
db = <sqlalchemy.orm.session.Session object at 0x7f3a91c2e9d0>, cart = <Cart cart-7f2e91ab DE 2 lines>

    def test_quote_with_expired_coupon_does_not_crash(client, db, cart):
        add_coupon(db, "OLD10", timedelta(days=-1))
>       r = client.post("/api/v1/checkout/quote", json={{"cart_id": cart.id, "coupon_code": "OLD10"}})

{test}:{test_line}:
{SEP}
{site}/starlette/testclient.py:597: in post
    return super().post(
{site}/httpx/_client.py:1144: in post
    return self.request(
{site}/starlette/testclient.py:488: in request
    return super().request(
{site}/httpx/_client.py:825: in request
    return self.send(request, auth=auth, follow_redirects=follow_redirects)
{site}/starlette/testclient.py:381: in handle_request
    raise exc
{site}/starlette/middleware/errors.py:165: in __call__
    await self.app(scope, receive, _send)
app/middleware.py:31: in __call__
    await self.app(scope, receive, send_with_request_id)
{site}/fastapi/routing.py:212: in run_endpoint_function
    return await run_in_threadpool(dependant.call, **values)
app/routers/checkout.py:{quote_line}: in quote
    return QuoteOut.from_quote(price_cart(db, cart, body.coupon_code))
app/services/pricing.py:{call_line}: in price_cart
    elif not coupon_is_active(coupon):
{SEP}

coupon = <Coupon OLD10 percent 10>
now = datetime.datetime({stamp}, tzinfo=datetime.timezone.utc)

    def coupon_is_active(coupon: Coupon, now: datetime | None = None) -> bool:
        \"\"\"False once the coupon has expired or been used up.\"\"\"
        now = now or utcnow()
>       if coupon.expires_at is not None and coupon.expires_at <= now:
E       TypeError: can't compare offset-naive and offset-aware datetimes

app/services/discounts.py:{cmp_line}: TypeError
{rule("Captured log call", "-")}
ERROR    shop.errors:errors.py:{log_line} unhandled error on POST /api/v1/checkout/quote
"""


def _failure_unit(repo: Repo) -> str:
    cmp_line = repo.line_of("app/services/discounts.py", "as_utc(coupon.expires_at) <= now")
    test_line = repo.line_of("tests/test_discounts.py", "assert not coupon_is_active(make(expires_at=NOW - ")
    return f"""
    def test_expired_coupon_is_inactive():
>       assert not coupon_is_active(make(expires_at=NOW - timedelta(seconds=1)), now=NOW)

tests/test_discounts.py:{test_line}:
{SEP}

coupon = <Coupon SPRING15 percent 15>, now = datetime.datetime(2026, 3, 1, 12, 0)

    def coupon_is_active(coupon: Coupon, now: datetime | None = None) -> bool:
        \"\"\"False once the coupon has expired or been used up.\"\"\"
        now = now or utcnow()
>       if coupon.expires_at is not None and as_utc(coupon.expires_at) <= now:
E       TypeError: can't compare offset-naive and offset-aware datetimes

app/services/discounts.py:{cmp_line}: TypeError
"""


def _failure_date(repo: Repo, now: datetime) -> tuple[str, str]:
    """The failure when the message has the whole datetime, and pytest's one-line reason for it."""
    line = repo.line_of("tests/test_checkout_coupons.py", 'assert error["message"] == f"Coupon OLD10 expired on')
    expires = (now - timedelta(days=1)).replace(tzinfo=None)
    got, want = f"Coupon OLD10 expired on {expires}.", f"Coupon OLD10 expired on {expires.date()}."
    reason = f"AssertionError: assert {got!r} == {want!r}"
    marks = " " * (len(want) - 1) + "+" * (len(got) - len(want))
    return (
        f"""
client = <starlette.testclient.TestClient object at 0x7f0c44b1a690>
db = <sqlalchemy.orm.session.Session object at 0x7f0c44b1bd10>, cart = <Cart cart-7f2e91ab DE 2 lines>

    def test_quote_with_expired_coupon_is_422(client, db, cart):
        add_coupon(db, "OLD10", timedelta(days=-1))
        r = client.post("/api/v1/checkout/quote", json={{"cart_id": cart.id, "coupon_code": "OLD10"}})
        assert r.status_code == 422
        error = r.json()["error"]
        assert error["code"] == "COUPON_EXPIRED"
>       assert error["message"] == f"Coupon OLD10 expired on {{yesterday()}}."
E       {reason}
E
E         - {want}
E         + {got}
E         ? {marks}

tests/test_checkout_coupons.py:{line}: AssertionError
""",
        reason,
    )


def _failure_sorted(repo: Repo) -> str:
    keys = list(json.loads(repo.files["app/i18n/zh_CN.json"]))
    at = keys.index("errors.coupon_invalid")
    line = repo.line_of("tests/test_i18n.py", "assert keys == sorted(keys)")
    return f"""
locale = 'zh_CN'

    @pytest.mark.parametrize("locale", SUPPORTED)
    def test_locale_files_are_sorted(locale):
        keys = list(load(locale))
>       assert keys == sorted(keys), f"{{locale}}.json keys are not sorted"
E       AssertionError: zh_CN.json keys are not sorted
E       assert ['cart.empty'...ut_for_later', ...] == ['cart.empty'...ut_for_later', ...]
E
E         At index {at} diff: 'errors.coupon_invalid' != 'errors.coupon_expired'
E         Use -v to get more diff

tests/test_i18n.py:{line}: AssertionError
"""


def _ruff(repo: Repo) -> str:
    """What `ruff check` prints for the lines of app/ and tests/ longer than 120 characters."""
    out: list[str] = []
    for rel in sorted(r for r in repo.files if r.endswith(".py") and r.startswith(("app/", "tests/"))):
        lines = repo.files[rel].split("\n")
        for n, line in enumerate(lines, 1):
            if len(line) <= 120:
                continue
            gutter = len(str(n + 1))
            shown = [k for k in range(max(1, n - 2), n + 2) if k <= len(lines)]
            show = [f"{k:>{gutter}} | {lines[k - 1]}".rstrip() for k in shown]
            at = shown.index(n) + 1
            mark = " " * gutter + " |" + " " * 121 + "^" * (len(line) - 120) + " E501"
            out += [f"{rel}:{n}:121: E501 Line too long ({len(line)} > 120)", " " * gutter + " |"]
            out += [*show[:at], mark, *show[at:], " " * gutter + " |", ""]
    found = sum(1 for line in out if "E501 Line too long" in line)
    return "\n".join(out) + f"\nFound {found} error{'s' if found != 1 else ''}.\n"


def _status(repo: Repo) -> str:
    changed = [f" M {rel}" for rel in sorted(repo.original) if repo.files[rel] != repo.original[rel]]
    untracked = [f"?? {rel}" for rel in sorted(repo.files) if rel not in repo.original]
    return "\n".join(changed + untracked) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUTPUT
    text = build()
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}: {text.count(chr(10))} lines, {len(text.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
