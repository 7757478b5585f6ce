//! Credentials, roles and tenant isolation. The 401/403 checks walk `lancet::http::route_table()`,
//! so a route added without a role cannot pass them.

use std::time::{Duration, Instant};

use lancet::auth::Role;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::*;

const UNAUTHENTICATED: u32 = 16;
const PERMISSION_DENIED: u32 = 15;

async fn call(
    client: &reqwest::Client,
    method: Method,
    url: String,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = client.request(method.clone(), url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if method == Method::POST {
        request = request.json(&body);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        headers,
    )
}

fn concrete(path: &str, table: &str) -> String {
    path.replace("{id}", table).replace("{index_name}", "idx")
}

#[tokio::test]
async fn every_route_demands_valid_credentials() {
    let s = Server::start().await;
    let anonymous = reqwest::Client::new();
    let routes = lancet::http::route_table();
    assert!(
        routes.len() > 40,
        "route table looks short: {}",
        routes.len()
    );
    let bad: [(&str, &[(&str, &str)]); 5] = [
        ("none", &[]),
        ("garbled bearer", &[("authorization", "Bearer not-a-key")]),
        ("wrong scheme", &[("authorization", "Basic dXNlcjpwYXNz")]),
        ("empty bearer", &[("authorization", "Bearer ")]),
        ("wrong api key", &[("x-api-key", "lk_00000000")]),
    ];
    for route in &routes {
        let method = Method::from_bytes(route.method.as_bytes()).unwrap();
        let url = s.url(&concrete(route.path, "t"));
        for (what, headers) in bad {
            let (status, body, h) =
                call(&anonymous, method.clone(), url.clone(), headers, json!({})).await;
            assert_eq!(
                status, 401,
                "{what} on {} {}: {body}",
                route.method, route.path
            );
            assert_error(status, &body, 401, UNAUTHENTICATED);
            assert_eq!(body["type"], "/errors/unauthorized-request");
            assert_eq!(h.get("www-authenticate").unwrap(), "Bearer");
        }
        // A credential in the body's identity is one too: a wrong one is refused.
        if method == Method::POST {
            let (status, body, _) = call(
                &anonymous,
                method.clone(),
                url.clone(),
                &[],
                json!({"identity": {"api_key": "lk_wrong"}}),
            )
            .await;
            assert_eq!(status, 401, "identity on {}: {body}", route.path);
        }
    }
    // The admin key passes authentication on every tenant route (what follows is 2xx, 400
    // or 404); the operator's routes are walked in `operator_routes_are_the_operators_alone`.
    for route in routes.iter().filter(|r| r.role != Role::Operator) {
        let method = Method::from_bytes(route.method.as_bytes()).unwrap();
        let (status, body, _) = call(
            &s.client,
            method,
            s.url(&concrete(route.path, "t")),
            &[],
            json!({}),
        )
        .await;
        assert!(
            status != 401 && status != 403,
            "admin on {}: {status} {body}",
            route.path
        );
    }
    // Outside /v1 nothing is needed.
    let r = anonymous.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn roles_are_enforced_on_every_route() {
    let s = Server::start().await;
    s.create_table("t", 5).await;
    let read = client_with_key(&s.new_key("default", "read", &[]).await);
    let write = client_with_key(&s.new_key("default", "write", &[]).await);
    for route in lancet::http::route_table() {
        let method = Method::from_bytes(route.method.as_bytes()).unwrap();
        for (client, role) in [(&read, Role::Read), (&write, Role::Write)] {
            // Refused calls aim at the real table (a leak would change it); allowed ones at
            // another, so they cannot disturb the check.
            let table = if role < route.role { "t" } else { "probe" };
            let url = s.url(&concrete(route.path, table));
            let (status, body, _) = call(client, method.clone(), url, &[], json!({})).await;
            if role < route.role {
                assert_error(status, &body, 403, PERMISSION_DENIED);
                assert_eq!(body["type"], "/errors/forbidden-request");
            } else {
                assert!(
                    status != 401 && status != 403,
                    "{role} on {}: {status} {body}",
                    route.path
                );
            }
        }
    }
    // The refused writes changed nothing.
    assert_eq!(s.count("t", json!({})).await, 5);
    assert_eq!(s.version("t").await, 1);
    // The body's identity is a credential when no header carries one.
    let key = s.new_key("default", "read", &[]).await;
    let (status, body, _) = call(
        &reqwest::Client::new(),
        Method::POST,
        s.url("/v1/table/t/count_rows"),
        &[],
        json!({"identity": {"api_key": key}}),
    )
    .await;
    assert_eq!((status, body), (200, json!(5)));
}

const OPERATOR_KEY: &str = "api-tests-operator-key";

#[tokio::test]
async fn operator_routes_are_the_operators_alone() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start_with(data, &[("LANCET_OPERATOR_KEY", OPERATOR_KEY)]).await;
    s.create_table("t", 5).await;
    let operator = client_with_key(OPERATOR_KEY);
    let routes = lancet::http::route_table();
    let admin_routes = routes.iter().filter(|r| r.role == Role::Operator).count();
    assert!(admin_routes >= 14, "{admin_routes} operator routes");
    for route in &routes {
        let method = Method::from_bytes(route.method.as_bytes()).unwrap();
        let url = s.url(&concrete(route.path, "t").replace("{tenant}", "nobody"));
        if route.role == Role::Operator {
            assert!(route.path.starts_with("/v1/admin/"), "{}", route.path);
            // No tenant credential reaches it, whatever its role.
            let (status, body, _) =
                call(&s.client, method.clone(), url.clone(), &[], json!({})).await;
            assert_error(status, &body, 403, PERMISSION_DENIED);
            let (status, body, _) = call(&operator, method, url, &[], json!({})).await;
            assert!(
                status != 401 && status != 403,
                "operator on {}: {status} {body}",
                route.path
            );
        } else {
            assert!(!route.path.starts_with("/v1/admin"), "{}", route.path);
            // The operator's credential reaches nothing of a tenant's.
            let (status, body, _) = call(&operator, method, url, &[], json!({})).await;
            assert_error(status, &body, 403, PERMISSION_DENIED);
            assert!(
                body["detail"].as_str().unwrap().contains("/v1/admin"),
                "{body}"
            );
        }
    }
    // The refused calls changed nothing.
    assert_eq!(s.count("t", json!({})).await, 5);
    assert_eq!(s.version("t").await, 1);
}

#[tokio::test]
async fn tenants_cannot_see_or_touch_each_other() {
    let s = Server::start().await;
    let (ha, hb) = (
        s.with_key(&s.new_key("alpha", "admin", &[]).await),
        s.with_key(&s.new_key("beta", "admin", &[]).await),
    );
    let (a, b) = (ha.client.clone(), hb.client.clone());
    let post = |c: &reqwest::Client, path: &str, body: Value| {
        let c = c.clone();
        let url = s.url(path);
        async move { call(&c, Method::POST, url, &[], body).await }
    };
    // Alpha makes a namespace and a table.
    assert_eq!(
        post(&a, "/v1/namespace/secret/create", json!({})).await.0,
        200
    );
    let (status, v) = ha
        .post_arrow("/v1/table/secret$orders/create", &sample(0, 7))
        .await;
    assert_eq!(status, 200, "{v}");

    // Beta's probes answer exactly as for things that do not exist.
    let probes = [
        (
            "/v1/table/secret$orders/describe",
            "/v1/table/secret$nothing/describe",
        ),
        (
            "/v1/table/secret$orders/exists",
            "/v1/table/secret$nothing/exists",
        ),
        (
            "/v1/table/secret$orders/count_rows",
            "/v1/table/secret$nothing/count_rows",
        ),
        (
            "/v1/table/secret$orders/delete",
            "/v1/table/secret$nothing/delete",
        ),
        (
            "/v1/table/secret$orders/drop",
            "/v1/table/secret$nothing/drop",
        ),
        (
            "/v1/namespace/secret/exists",
            "/v1/namespace/nothing/exists",
        ),
        (
            "/v1/namespace/secret/describe",
            "/v1/namespace/nothing/describe",
        ),
        ("/v1/namespace/secret/drop", "/v1/namespace/nothing/drop"),
    ];
    for (real, missing) in probes {
        let body = json!({"predicate": "id >= 0"});
        let (s1, b1, _) = post(&b, real, body.clone()).await;
        let (s2, b2, _) = post(&b, missing, body).await;
        assert_eq!(s1, 404, "{real}: {b1}");
        assert_eq!(
            (s1, &b1["type"], &b1["code"]),
            (s2, &b2["type"], &b2["code"]),
            "{real}"
        );
        let scrub = |v: &Value| {
            v["detail"]
                .as_str()
                .unwrap()
                .replace("orders", "X")
                .replace("nothing", "X")
                .replace("secret", "X")
        };
        assert_eq!(scrub(&b1), scrub(&b2), "{real} vs {missing}");
    }
    // Beta's listings are its own.
    let (_, list, _) = post(&b, "/v1/namespace/$/list", json!({})).await;
    assert_eq!(list["namespaces"], json!([]));
    let (_, tables, _) = call(&b, Method::GET, s.url("/v1/tables"), &[], json!({})).await;
    assert_eq!(tables["tables"], json!([]));
    // Beta's writes go to its own catalog; alpha's table is unchanged.
    assert_eq!(
        post(&b, "/v1/namespace/secret/create", json!({})).await.0,
        200
    );
    let (status, v) = hb
        .post_arrow("/v1/table/secret$orders/create", &sample(100, 2))
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, n, _) = post(
        &b,
        "/v1/table/secret$orders/delete",
        json!({"predicate": "id >= 0"}),
    )
    .await;
    assert_eq!(n["version"], 2, "{n}");
    let (_, count_a, _) = post(&a, "/v1/table/secret$orders/count_rows", json!({})).await;
    assert_eq!(count_a, json!(7));
    let (_, describe_a, _) = post(&a, "/v1/table/secret$orders/describe", json!({})).await;
    assert_eq!(describe_a["version"], 1);
    // Registering alpha's table directory from beta is refused: locations stay inside a tenant.
    let location = describe_a["location"].as_str().unwrap().to_string();
    for loc in [location.clone(), "../alpha/secret".into(), "/etc".into()] {
        let (status, body, _) =
            post(&b, "/v1/table/stolen/register", json!({"location": loc})).await;
        assert_error(status, &body, 400, 13);
    }
    let (_, count_a, _) = post(&a, "/v1/table/secret$orders/count_rows", json!({})).await;
    assert_eq!(count_a, json!(7));
}

#[tokio::test]
async fn context_headers_cannot_change_identity_or_database() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let read_key = s.new_key("default", "read", &[]).await;
    let read = client_with_key(&read_key);
    let injected = json!({
        "predicate": "id >= 0",
        "context": {
            "header.Authorization": format!("Bearer {ADMIN_KEY}"),
            "header.x-api-key": ADMIN_KEY,
            "header.x-service-database": "elsewhere",
            "header.x-lancedb-database": "elsewhere",
        }
    });
    let (status, body, _) = call(
        &read,
        Method::POST,
        s.url("/v1/table/t/delete"),
        &[],
        injected.clone(),
    )
    .await;
    assert_error(status, &body, 403, PERMISSION_DENIED);
    let (status, body, _) = call(
        &reqwest::Client::new(),
        Method::POST,
        s.url("/v1/table/t/delete"),
        &[],
        injected,
    )
    .await;
    assert_error(status, &body, 401, UNAUTHENTICATED);
    assert_eq!(s.count("t", json!({})).await, 3);
    // The database was not switched: the root-level table is still what count_rows sees.
    let (status, body, _) = call(
        &read,
        Method::POST,
        s.url("/v1/table/t/count_rows"),
        &[],
        json!({"context": {"header.x-service-database": "elsewhere"}}),
    )
    .await;
    assert_eq!((status, body), (200, json!(3)));
}

#[tokio::test]
async fn database_selects_a_namespace_and_scopes_bind() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start_with(data, &[("LANCET_HOST_DOMAIN", "lancet.test")]).await;
    type Headers = &'static [(&'static str, &'static str)];
    let get = |c: &reqwest::Client, path: &str, headers: Headers| {
        let (c, url) = (c.clone(), s.url(path));
        async move { call(&c, Method::GET, url, headers, json!({})).await }
    };
    let count = |c: &reqwest::Client, table: &str, headers: Headers| {
        let (c, url) = (c.clone(), s.url(&format!("/v1/table/{table}/count_rows")));
        async move { call(&c, Method::POST, url, headers, json!({})).await }
    };
    // The extended deployment's create and list (spec 4.16).
    let r = s
        .client
        .post(s.url("/v1/tables/orders"))
        .header("x-service-database", "sales")
        .header("content-type", "application/vnd.apache.arrow.stream")
        .body(ipc_stream(&sample(0, 4)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (status, list, _) = get(&s.client, "/v1/tables", &[("x-service-database", "sales")]).await;
    assert_eq!(
        (status, &list["tables"]),
        (200, &json!(["orders"])),
        "{list}"
    );
    // A namespace client without the header sees it inside namespace "sales".
    assert_eq!(s.count("sales$orders", json!({})).await, 4);
    assert_eq!(
        get(&s.client, "/v1/tables", &[]).await.1["tables"],
        json!([])
    );
    // The lancedb header and the host name select it too.
    for (path, headers) in [
        ("/v1/table", &[("x-lancedb-database", "sales")]),
        ("/v1/tables", &[("host", "sales.lancet.test")]),
    ] {
        assert_eq!(
            get(&s.client, path, headers).await.1["tables"],
            json!(["orders"]),
            "{headers:?}"
        );
    }
    assert_eq!(
        count(&s.client, "orders", &[("x-service-database", "sales")])
            .await
            .1,
        json!(4)
    );

    // A key scoped to namespace "sales": fine there, 403 for any other database or the root.
    let scoped = client_with_key(&s.new_key("default", "write", &["sales"]).await);
    let (status, n, _) = count(&scoped, "orders", &[("x-service-database", "sales")]).await;
    assert_eq!((status, n), (200, json!(4)));
    let (status, n, _) = count(&scoped, "sales$orders", &[]).await;
    assert_eq!((status, n), (200, json!(4)));
    let refused = [
        get(
            &scoped,
            "/v1/tables",
            &[("x-service-database", "marketing")],
        )
        .await,
        get(&scoped, "/v1/tables", &[]).await,
        call(
            &scoped,
            Method::POST,
            s.url("/v1/namespace/$/list"),
            &[],
            json!({}),
        )
        .await,
    ];
    for (status, body, _) in refused {
        assert_error(status, &body, 403, PERMISSION_DENIED);
    }
    let (status, body, _) = get(&s.client, "/v1/tables", &[("x-service-database", "a/b")]).await;
    assert_error(status, &body, 400, 13);
}

#[tokio::test]
async fn failed_logins_are_answered_fast_and_others_keep_working() {
    let s = Server::start().await;
    let b = client_with_key(&s.new_key("beta", "write", &[]).await);
    let r = b
        .post(s.url("/v1/table/t/create"))
        .header("content-type", "application/vnd.apache.arrow.stream")
        .body(ipc_stream(&sample(0, 10)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let started = Instant::now();
    let attackers: Vec<_> = (0..800)
        .map(|i| {
            let url = s.url("/v1/table/t/count_rows");
            tokio::spawn(async move {
                let c = reqwest::Client::new();
                c.post(url)
                    .header("x-api-key", format!("lk_guess_{i}"))
                    .json(&json!({}))
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let mut served = 0;
    for _ in 0..20 {
        let (status, n, _) = call(
            &b,
            Method::POST,
            s.url("/v1/table/t/count_rows"),
            &[],
            json!({}),
        )
        .await;
        assert_eq!((status, n), (200, json!(10)));
        served += 1;
    }
    for a in attackers {
        assert_eq!(a.await.unwrap(), 401);
    }
    // Printed, not asserted: these machines are too noisy for timing assertions.
    eprintln!(
        "800 refused guesses and {served} real requests in {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn first_start_makes_a_key_and_revoked_keys_stop_working() {
    let data = tempfile::tempdir().unwrap();
    let mut s = Server::start_with(data, &[("LANCET_BOOTSTRAP_KEY", "")]).await;
    let banner = s.banner.join("\n");
    let key = banner
        .split_whitespace()
        .find(|w| w.starts_with("lk_"))
        .unwrap_or_else(|| panic!("no key printed: {banner}"))
        .to_string();
    assert!(banner.contains("auth.toml"), "{banner}");
    let stored = std::fs::read_to_string(s.data_dir().join("_auth/auth.toml")).unwrap();
    assert!(!stored.contains(&key), "the key itself must not be stored");
    let c = client_with_key(&key);
    let (status, _, _) = call(
        &c,
        Method::POST,
        s.url("/v1/namespace/ns/create"),
        &[],
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
    // The bootstrap key is not accepted by this server.
    let (status, _, _) = call(&s.client, Method::GET, s.url("/v1/tables"), &[], json!({})).await;
    assert_eq!(status, 401);
    // A second start does not make another key.
    let data = s.take_data();
    s.kill();
    let s = Server::start_with(data, &[("LANCET_BOOTSTRAP_KEY", "")]).await;
    assert!(s.banner.is_empty(), "{:?}", s.banner);
    // Revoke: a running server drops the key within a second or so.
    let second = s.new_key("default", "read", &[]).await;
    let listing = s.keys_cli(&["list"]);
    assert_eq!(listing.lines().count(), 2, "{listing}");
    assert!(!listing.contains(&second));
    let id = listing
        .lines()
        .find(|l| l.contains("role=read"))
        .unwrap()
        .split('\t')
        .next()
        .unwrap()
        .to_string();
    s.keys_cli(&["revoke", &id]);
    let c = client_with_key(&second);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, _) = call(&c, Method::GET, s.url("/v1/tables"), &[], json!({})).await;
        if status == 401 {
            break;
        }
        assert!(Instant::now() < deadline, "revoked key still accepted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, _) = call(
        &client_with_key(&key),
        Method::GET,
        s.url("/v1/tables"),
        &[],
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
}

mod jwt {
    use super::*;
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};

    const SECRET: &str = "a-shared-secret-of-at-least-32-bytes!";

    fn fixtures() -> String {
        repo_path("tests/fixtures/jwt")
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    /// A server whose auth file trusts one issuer; returns it and a token signer.
    async fn server(algorithm: &str) -> (Server, impl Fn(Value) -> String) {
        let data = tempfile::tempdir().unwrap();
        let key_line = match algorithm {
            "HS256" => format!("secret = \"{SECRET}\""),
            "RS256" => format!("public_key_file = \"{}/rsa_public.pem\"", fixtures()),
            _ => format!("public_key_file = \"{}/ec_public.pem\"", fixtures()),
        };
        std::fs::create_dir_all(data.path().join("_auth")).unwrap();
        std::fs::write(
            data.path().join("_auth/auth.toml"),
            format!(
                "[jwt]\nissuer = \"https://issuer.test\"\naudience = \"lancet\"\nalgorithm = \"{algorithm}\"\n{key_line}\nleeway_seconds = 0\n"
            ),
        )
        .unwrap();
        let s = Server::start_with(data, &[]).await;
        let (alg, key) = match algorithm {
            "HS256" => (
                Algorithm::HS256,
                EncodingKey::from_secret(SECRET.as_bytes()),
            ),
            "RS256" => (
                Algorithm::RS256,
                EncodingKey::from_rsa_pem(
                    &std::fs::read(format!("{}/rsa_private.pem", fixtures())).unwrap(),
                )
                .unwrap(),
            ),
            _ => (
                Algorithm::ES256,
                EncodingKey::from_ec_pem(
                    &std::fs::read(format!("{}/ec_private.pem", fixtures())).unwrap(),
                )
                .unwrap(),
            ),
        };
        let sign = move |claims: Value| encode(&Header::new(alg), &claims, &key).unwrap();
        (s, sign)
    }

    fn claims(tenant: &str, role: &str) -> Value {
        json!({"iss": "https://issuer.test", "aud": "lancet", "exp": now() + 300,
               "nbf": now() - 5, "sub": "user-1", "tenant": tenant, "role": role})
    }

    #[tokio::test]
    async fn access_tokens_are_verified() {
        for algorithm in ["HS256", "RS256", "ES256"] {
            let (s, sign) = server(algorithm).await;
            let writer = client_with_key(&sign(claims("acme", "write")));
            let r = writer
                .post(s.url("/v1/table/t/create"))
                .header("content-type", "application/vnd.apache.arrow.stream")
                .body(ipc_stream(&sample(0, 6)))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{algorithm}: {}", r.text().await.unwrap());
            let (status, n, _) = call(
                &writer,
                Method::POST,
                s.url("/v1/table/t/count_rows"),
                &[],
                json!({}),
            )
            .await;
            assert_eq!((status, n), (200, json!(6)), "{algorithm}");
            // In a body's identity.auth_token too.
            let (status, n, _) = call(
                &reqwest::Client::new(),
                Method::POST,
                s.url("/v1/table/t/count_rows"),
                &[],
                json!({"identity": {"auth_token": sign(claims("acme", "read"))}}),
            )
            .await;
            assert_eq!((status, n), (200, json!(6)), "{algorithm}");

            let mut refused = Vec::new();
            for (what, key, value) in [
                ("expired", "exp", json!(now() - 60)),
                ("not yet valid", "nbf", json!(now() + 600)),
                ("wrong audience", "aud", json!("someone-else")),
                ("wrong issuer", "iss", json!("https://evil.test")),
            ] {
                let mut c = claims("acme", "admin");
                c[key] = value;
                refused.push((what, sign(c)));
            }
            let mut tampered = sign(claims("acme", "read"));
            let mid = tampered.rfind('.').unwrap() - 3;
            tampered.replace_range(
                mid..mid + 1,
                if &tampered[mid..mid + 1] == "A" {
                    "B"
                } else {
                    "A"
                },
            );
            refused.push(("tampered", tampered));
            refused.push(("garbled", "eyJhbGciOiJIUzI1NiJ9.e30.xxxx".into()));
            for (what, token) in refused {
                let (status, body, _) = call(
                    &client_with_key(&token),
                    Method::POST,
                    s.url("/v1/table/t/count_rows"),
                    &[],
                    json!({}),
                )
                .await;
                assert_error(status, &body, 401, UNAUTHENTICATED);
                assert!(
                    !body["detail"].as_str().unwrap().contains(&token),
                    "{what}: token echoed"
                );
            }
            // A read token cannot write; another tenant's token cannot see the table.
            let reader = client_with_key(&sign(claims("acme", "read")));
            let (status, body, _) = call(
                &reader,
                Method::POST,
                s.url("/v1/table/t/delete"),
                &[],
                json!({"predicate": "true"}),
            )
            .await;
            assert_error(status, &body, 403, PERMISSION_DENIED);
            let other = client_with_key(&sign(claims("globex", "admin")));
            let (status, _, _) = call(
                &other,
                Method::POST,
                s.url("/v1/table/t/count_rows"),
                &[],
                json!({}),
            )
            .await;
            assert_eq!(status, 404);
            let (_, n, _) = call(
                &writer,
                Method::POST,
                s.url("/v1/table/t/count_rows"),
                &[],
                json!({}),
            )
            .await;
            assert_eq!(
                n,
                json!(6),
                "{algorithm}: refused requests changed the table"
            );
        }
    }
}
