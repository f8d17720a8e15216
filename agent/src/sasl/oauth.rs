//! OAUTHBEARER (RFC 7628, Kafka's KIP-255 and KIP-768): the client sends a JWT, which
//! the agent validates against the public keys of a JWKS file: the signature (asymmetric
//! algorithms only), `exp` and `nbf` with a clock skew, the issuer and the audience when
//! configured. The principal is the subject claim. The file is read again when it
//! changes, so keys rotate without a restart.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// What a token must satisfy (Kafka's `sasl.oauthbearer.*` settings).
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// The JWKS document (`{"keys": [...]}`) holding the issuer's public keys.
    pub jwks: PathBuf,
    /// `iss` must be this, when set.
    pub issuer: Option<String>,
    /// `aud` must name one of these, when any.
    pub audience: Vec<String>,
    /// The claim whose value is the principal's name.
    pub sub_claim: String,
    /// How far `exp` and `nbf` may be off.
    pub clock_skew: Duration,
}

/// The keys as last read, and the file's bytes then.
#[derive(Debug)]
struct Keys {
    contents: Vec<u8>,
    set: Arc<JwkSet>,
}

/// A validated token.
#[derive(Debug, PartialEq, Eq)]
pub struct Token {
    pub principal: String,
    /// `exp`, in milliseconds since the epoch.
    pub expires_ms: u64,
}

/// Validates tokens; shared by the agent's connections.
#[derive(Debug)]
pub struct Validator {
    settings: OAuthSettings,
    keys: RwLock<Keys>,
}

/// The algorithms a JWKS key can verify: never `HS*` (a shared secret in a file of
/// public keys) and never `none`.
const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| {
        format!(
            "cannot read sasl_oauthbearer_jwks_location {}",
            path.display()
        )
    })
}

fn parse_keys(path: &Path, text: &[u8]) -> anyhow::Result<JwkSet> {
    let set: JwkSet = serde_json::from_slice(text).with_context(|| {
        format!(
            "sasl_oauthbearer_jwks_location {} is not a JWKS document ({{\"keys\": [...]}})",
            path.display()
        )
    })?;
    if set.keys.is_empty() {
        anyhow::bail!(
            "sasl_oauthbearer_jwks_location {} holds no key",
            path.display()
        );
    }
    for key in &set.keys {
        DecodingKey::from_jwk(key).with_context(|| {
            format!(
                "sasl_oauthbearer_jwks_location {}: key {} is not a public key strata can use",
                path.display(),
                key.common.key_id.as_deref().unwrap_or("without a kid")
            )
        })?;
    }
    Ok(set)
}

impl Validator {
    /// Reads the JWKS file; an error names it and what is wrong.
    pub fn load(settings: OAuthSettings) -> anyhow::Result<Validator> {
        let contents = read(&settings.jwks)?;
        let set = parse_keys(&settings.jwks, &contents)?;
        Ok(Validator {
            keys: RwLock::new(Keys {
                contents,
                set: Arc::new(set),
            }),
            settings,
        })
    }

    /// The keys, read again first if the file changed since (it is small, and read
    /// once per authentication, not per request). A file that no longer loads leaves
    /// the previous keys in use, and is reported once.
    fn keys(&self) -> Arc<JwkSet> {
        let Ok(now) = read(&self.settings.jwks) else {
            return Arc::clone(&self.keys.read().unwrap_or_else(|e| e.into_inner()).set);
        };
        {
            let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
            if keys.contents == now {
                return Arc::clone(&keys.set);
            }
        }
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if keys.contents != now {
            match parse_keys(&self.settings.jwks, &now) {
                Ok(set) => {
                    tracing::info!(jwks = %self.settings.jwks.display(), keys = set.keys.len(), "OAUTHBEARER keys changed");
                    keys.set = Arc::new(set);
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "the JWKS file changed but does not load; the previous keys stay in use")
                }
            }
            keys.contents = now;
        }
        Arc::clone(&keys.set)
    }

    /// Validates `token` at `now_ms` (milliseconds since the epoch).
    pub fn validate(&self, token: &str, now_ms: u64) -> Result<Token, String> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("the token is not a JWT: {e}"))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(format!(
                "the token's algorithm {:?} is not an asymmetric one",
                header.alg
            ));
        }
        let keys = self.keys();
        let jwk = match &header.kid {
            Some(kid) => keys
                .find(kid)
                .ok_or_else(|| format!("no key {kid:?} in the JWKS"))?,
            None if keys.keys.len() == 1 => &keys.keys[0],
            None => return Err("the token names no key (kid) and the JWKS has several".into()),
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("the key is unusable: {e}"))?;
        let mut validation = Validation::new(header.alg);
        // Times are checked below, on the agent's clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.required_spec_claims = HashSet::new();
        match &self.settings.issuer {
            Some(iss) => validation.set_issuer(&[iss]),
            None => validation.iss = None,
        }
        if self.settings.audience.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.settings.audience);
        }
        let claims = jsonwebtoken::decode::<serde_json::Map<String, Value>>(
            token.as_bytes(),
            &key,
            &validation,
        )
        .map_err(|e| self.refusal(&e, jwk))?
        .claims;
        let skew_ms = self.settings.clock_skew.as_millis() as u64;
        let seconds = |name: &str| claims.get(name).map(|v| v.as_f64().filter(|s| *s >= 0.0));
        let expires_ms = match seconds("exp") {
            Some(Some(s)) => (s * 1000.0) as u64,
            Some(None) => return Err("the token's exp is not a number of seconds".into()),
            None => return Err("the token has no exp".into()),
        };
        if expires_ms.saturating_add(skew_ms) <= now_ms {
            return Err(format!(
                "the token expired {} s ago",
                (now_ms - expires_ms) / 1000
            ));
        }
        match seconds("nbf") {
            Some(Some(s)) if (s * 1000.0) as u64 > now_ms.saturating_add(skew_ms) => {
                return Err("the token is not valid yet (nbf)".into());
            }
            Some(None) => return Err("the token's nbf is not a number of seconds".into()),
            _ => {}
        }
        let principal = match claims.get(&self.settings.sub_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(format!(
                    "the token has no {} claim naming its principal",
                    self.settings.sub_claim
                ));
            }
        };
        Ok(Token {
            principal,
            expires_ms,
        })
    }
}

impl Validator {
    /// Why the library refused a token, in the operator's terms.
    fn refusal(&self, e: &jsonwebtoken::errors::Error, jwk: &jsonwebtoken::jwk::Jwk) -> String {
        use jsonwebtoken::errors::ErrorKind;
        match e.kind() {
            ErrorKind::InvalidSignature => format!(
                "its signature does not verify with key {}",
                jwk.common.key_id.as_deref().unwrap_or("(no kid)")
            ),
            ErrorKind::InvalidIssuer => format!(
                "its iss is not {}",
                self.settings.issuer.as_deref().unwrap_or_default()
            ),
            ErrorKind::InvalidAudience => format!(
                "its aud names none of {}",
                self.settings.audience.join(", ")
            ),
            ErrorKind::InvalidAlgorithm => {
                "its algorithm does not fit the key it names".to_string()
            }
            _ => format!("the token is not valid: {e}"),
        }
    }
}

/// The token and the authorization id of a client's initial response (RFC 7628 §3.1):
/// `n,[a=authzid],` then `\x01`-separated `key=value` pairs, one of them
/// `auth=Bearer <token>`, ended by `\x01\x01`.
pub fn parse_client_response(input: &[u8]) -> Result<(Option<String>, String), &'static str> {
    let text = std::str::from_utf8(input).map_err(|_| "not UTF-8")?;
    let rest = text
        .strip_prefix("n,")
        .or_else(|| text.strip_prefix("y,"))
        .ok_or("no GS2 header (n,,)")?;
    let (authzid, rest) = rest.split_once(',').ok_or("no GS2 header (n,,)")?;
    let authzid = match authzid {
        "" => None,
        a => Some(
            a.strip_prefix("a=")
                .ok_or("the GS2 header's authorization id is not a=...")?
                .to_string(),
        ),
    };
    let pairs = rest
        .strip_prefix('\x01')
        .and_then(|r| r.strip_suffix("\x01\x01"))
        .ok_or("the key-value pairs are not \\x01-separated and \\x01\\x01-ended")?;
    let mut token = None;
    for pair in pairs.split('\x01') {
        let (key, value) = pair.split_once('=').ok_or("a key-value pair without =")?;
        if key == "auth" {
            let t = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .ok_or("auth is not \"Bearer <token>\"")?;
            token = Some(t.trim().to_string());
        }
    }
    match token {
        Some(t) if !t.is_empty() => Ok((authzid, t)),
        _ => Err("no auth=Bearer <token>"),
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{EncodingKey, Header};

    use super::*;

    /// A P-256 key: its signing key and its JWK.
    fn key(kid: &str) -> (EncodingKey, Value) {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
        let point = pair.public_key().as_ref();
        let jwk = serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        (EncodingKey::from_ec_der(pkcs8.as_ref()), jwk)
    }

    fn sign(key: &EncodingKey, kid: &str, claims: Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.to_string());
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    }

    const NOW_MS: u64 = 1_800_000_000_000;

    #[test]
    fn tokens_are_checked_against_the_keys_and_the_agents_clock() {
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        let (k1, jwk1) = key("k1");
        std::fs::write(&jwks, serde_json::json!({ "keys": [jwk1] }).to_string()).unwrap();
        let v = Validator::load(OAuthSettings {
            jwks: jwks.clone(),
            issuer: Some("idp".into()),
            audience: vec!["strata".into()],
            sub_claim: "sub".into(),
            clock_skew: Duration::from_secs(30),
        })
        .unwrap();
        let now = NOW_MS / 1000;
        let claims = |exp: u64| serde_json::json!({"iss": "idp", "aud": "strata", "sub": "alice", "exp": exp});
        assert_eq!(
            v.validate(&sign(&k1, "k1", claims(now + 60)), NOW_MS),
            Ok(Token {
                principal: "alice".into(),
                expires_ms: (now + 60) * 1000
            })
        );
        // Within the skew an expired token still passes; past it, it does not.
        assert!(
            v.validate(&sign(&k1, "k1", claims(now - 10)), NOW_MS)
                .is_ok()
        );
        let e = v
            .validate(&sign(&k1, "k1", claims(now - 40)), NOW_MS)
            .unwrap_err();
        assert!(e.contains("expired 40 s ago"), "{e}");
        let mut early = claims(now + 60);
        early["nbf"] = (now + 120).into();
        assert!(
            v.validate(&sign(&k1, "k1", early), NOW_MS)
                .unwrap_err()
                .contains("nbf")
        );
        let mut elsewhere = claims(now + 60);
        elsewhere["aud"] = serde_json::json!(["a", "b"]);
        assert!(
            v.validate(&sign(&k1, "k1", elsewhere), NOW_MS)
                .unwrap_err()
                .contains("aud")
        );

        // A key not in the file yet is refused, then taken up when the file changes.
        let (k2, jwk2) = key("k2");
        let token2 = sign(&k2, "k2", claims(now + 60));
        assert!(
            v.validate(&token2, NOW_MS)
                .unwrap_err()
                .contains("no key \"k2\"")
        );
        // Signed by k2 but naming k1: the signature does not verify.
        let forged = sign(&k2, "k1", claims(now + 60));
        assert!(
            v.validate(&forged, NOW_MS)
                .unwrap_err()
                .contains("signature")
        );
        std::fs::write(&jwks, serde_json::json!({ "keys": [jwk2] }).to_string()).unwrap();
        assert_eq!(v.validate(&token2, NOW_MS).unwrap().principal, "alice");
        let token1 = sign(&k1, "k1", claims(now + 60));
        assert!(
            v.validate(&token1, NOW_MS)
                .unwrap_err()
                .contains("no key \"k1\"")
        );
        // A file that does not load leaves the keys as they were.
        std::fs::write(&jwks, "{").unwrap();
        assert!(v.validate(&token2, NOW_MS).is_ok());
    }

    #[test]
    fn client_responses_are_read_as_rfc_7628_writes_them() {
        assert_eq!(
            parse_client_response(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01"),
            Ok((None, "abc.def.ghi".to_string()))
        );
        // librdkafka sends extensions beside auth; they are ignored.
        assert_eq!(
            parse_client_response(b"n,a=alice,\x01auth=Bearer t\x01traceId=1\x01\x01"),
            Ok((Some("alice".to_string()), "t".to_string()))
        );
        for bad in [
            &b""[..],
            b"n,,auth=Bearer t",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01host=x\x01\x01",
            b"n,,\x01auth=Bearer \x01\x01",
            b"p=x,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer \xff\x01\x01",
        ] {
            assert!(parse_client_response(bad).is_err(), "{bad:?}");
        }
    }
}
