"""A minimal OpenID Connect provider served by the tests themselves (authorization code flow with
PKCE, RS256 ID tokens signed with PyJWT, JWKS, userinfo), on 127.0.0.1 in a thread.

Enough of the protocol for a relying party to log someone in as a real provider would: a login
form at ``/authorize`` (a person types a user name and password in a browser), one-time codes
bound to the client, redirect URI and PKCE challenge, client authentication at ``/token``.
``users`` (user name → password and claims) can change between logins, like groups at an IdP.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "fairway-test"
CLIENT_SECRET = "fairway-test-secret"  # noqa: S105 -- a test fixture


@dataclass
class Provider:
    users: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → {"password", "claims"}
    key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))
    kid: str = "test-key-1"
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # access token → user name
    server: ThreadingHTTPServer | None = None
    pkce_optional: bool = (
        False  # a code redeemed without a verifier is taken (providers that let a confidential client do it)
    )

    @property
    def issuer(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def settings(self) -> dict[str, str]:
        """The FAIRWAY_OIDC_* environment a Fairway server needs for this provider."""
        return {
            "FAIRWAY_OIDC_CLIENT_ID": CLIENT_ID,
            "FAIRWAY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "FAIRWAY_OIDC_ISSUER": self.issuer,
            "FAIRWAY_OIDC_AUTHORIZATION_ENDPOINT": f"{self.issuer}/authorize",
            "FAIRWAY_OIDC_TOKEN_ENDPOINT": f"{self.issuer}/token",
            "FAIRWAY_OIDC_USERINFO_ENDPOINT": f"{self.issuer}/userinfo",
            "FAIRWAY_OIDC_JWKS_ENDPOINT": f"{self.issuer}/jwks",
        }

    def start(self) -> Provider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                provider.handle(self, "GET")

            def do_POST(self) -> None:
                provider.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # --- the endpoints ---------------------------------------------------------------------------
    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(request.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        form: dict[str, str] = {}
        if method == "POST":
            body = request.rfile.read(int(request.headers.get("Content-Length") or 0)).decode()
            form = {k: v[0] for k, v in parse_qs(body).items()}
        route = {
            ("GET", "/.well-known/openid-configuration"): self.discovery,
            ("GET", "/authorize"): self.authorize_form,
            ("POST", "/authorize"): self.authorize_submit,
            ("POST", "/token"): self.token,
            ("GET", "/userinfo"): self.userinfo,
            ("GET", "/jwks"): self.jwks,
        }.get((method, url.path))
        if route is None:
            return self.send(request, 404, {"error": "not_found"})
        route(request, query, form)

    @staticmethod
    def send(request: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "text/html; charset=utf-8" if isinstance(body, str) else "application/json")
        request.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            request.send_header(k, v)
        request.end_headers()
        request.wfile.write(data)

    def discovery(self, request: BaseHTTPRequestHandler, query: dict[str, str], form: dict[str, str]) -> None:
        self.send(
            request,
            200,
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "userinfo_endpoint": f"{self.issuer}/userinfo",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
            },
        )

    def authorize_form(self, request: BaseHTTPRequestHandler, query: dict[str, str], form: dict[str, str]) -> None:
        if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
            return self.send(request, 400, "<h1>unknown client or response type</h1>")
        if "openid" not in query.get("scope", "").split() or query.get("code_challenge_method") != "S256":
            return self.send(request, 400, "<h1>openid scope and PKCE S256 required</h1>")
        self.send(request, 200, self.login_page(query, ""))

    @staticmethod
    def login_page(query: dict[str, str], error: str) -> str:
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in query.items()
        )
        return f"""<!doctype html><html><head><title>Test IdP: sign in</title>
<style>body{{font-family:sans-serif;background:#22303f;color:#fff;display:flex;justify-content:center;padding-top:80px}}
form{{background:#fff;color:#222;padding:28px 36px;border-radius:8px;width:320px}}
input{{display:block;width:100%;margin:6px 0 14px;padding:6px;box-sizing:border-box}}
button{{background:#6b3fa0;color:#fff;border:0;padding:8px 16px;border-radius:6px}}</style></head>
<body><form method="post" action="/authorize"><h2>Lab identity provider</h2>
<p>Sign in to continue to <b>{html.escape(query.get("client_id", ""))}</b></p>
{f'<p id="idp-error" style="color:#b00">{html.escape(error)}</p>' if error else ""}
<label>User name<input id="idp-username" name="username" autocomplete="off"></label>
<label>Password<input id="idp-password" name="password" type="password"></label>
{hidden}<button id="idp-submit" type="submit">Sign in</button></form></body></html>"""

    def authorize_submit(self, request: BaseHTTPRequestHandler, query: dict[str, str], form: dict[str, str]) -> None:
        username, password = form.pop("username", ""), form.pop("password", "")
        user = self.users.get(username)
        if user is None or not secrets.compare_digest(user["password"], password):
            return self.send(request, 200, self.login_page(form, "Wrong user name or password."))
        code = secrets.token_urlsafe(24)
        self.codes[code] = {
            "username": username,
            "redirect_uri": form["redirect_uri"],
            "nonce": form.get("nonce"),
            "challenge": form["code_challenge"],
            "expires": time.time() + 60,
        }
        target = f"{form['redirect_uri']}?{urlencode({'code': code, 'state': form.get('state', '')})}"
        self.send(request, 302, "", {"Location": target})

    def token(self, request: BaseHTTPRequestHandler, query: dict[str, str], form: dict[str, str]) -> None:
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return self.send(request, 401, {"error": "invalid_client"})
        grant = self.codes.pop(form.get("code", ""), None)  # one use
        if grant is None or grant["expires"] < time.time() or grant["redirect_uri"] != form.get("redirect_uri"):
            return self.send(request, 400, {"error": "invalid_grant"})
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if challenge != grant["challenge"] and not (self.pkce_optional and not verifier):
            return self.send(request, 400, {"error": "invalid_grant", "error_description": "PKCE"})
        claims = self.users[grant["username"]]["claims"]
        now = int(time.time())
        id_token = jwt.encode(
            {
                "iss": self.issuer,
                "sub": claims["sub"],
                "aud": CLIENT_ID,
                "iat": now,
                "exp": now + 300,
                "nonce": grant["nonce"],
                "email": claims.get("email"),
            },
            self.key,
            algorithm="RS256",
            headers={"kid": self.kid},
        )
        access = secrets.token_urlsafe(24)
        self.tokens[access] = grant["username"]
        self.send(
            request, 200, {"access_token": access, "token_type": "Bearer", "expires_in": 300, "id_token": id_token}
        )

    def userinfo(self, request: BaseHTTPRequestHandler, query: dict[str, str], form: dict[str, str]) -> None:
        auth = request.headers.get("Authorization", "")
        username = self.tokens.get(auth.removeprefix("Bearer ").strip())
        if username is None:
            return self.send(request, 401, {"error": "invalid_token"})
        self.send(request, 200, self.users[username]["claims"])

    def jwks(self, request: BaseHTTPRequestHandler, query: dict[str, str], form: dict[str, str]) -> None:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update({"kid": self.kid, "use": "sig", "alg": "RS256"})
        self.send(request, 200, {"keys": [jwk]})
