//! The server side of SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka's
//! KIP-84 use them), without channel binding, as Kafka's own server.
//!
//! The hashes, HMACs and PBKDF2 come from `aws-lc-rs`; this module only reads and writes
//! the attribute lists of the three messages and does RFC 5802's arithmetic on them.

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use strata_metastore::ScramCredential;

/// A SCRAM hash: SHA-256 or SHA-512.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

/// Kafka's bounds on a credential's iteration count (`ScramMechanism`).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

impl ScramHash {
    /// The SASL mechanism name.
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_mechanism(name: &str) -> Option<ScramHash> {
        match name {
            "SCRAM-SHA-256" => Some(ScramHash::Sha256),
            "SCRAM-SHA-512" => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// Kafka's `ScramMechanism` type byte (Describe/AlterUserScramCredentials).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramHash::Sha256 => 1,
            ScramHash::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(t: i8) -> Option<ScramHash> {
        match t {
            1 => Some(ScramHash::Sha256),
            2 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramHash::Sha256 => hmac::HMAC_SHA256,
            ScramHash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramHash::Sha256 => &digest::SHA256,
            ScramHash::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramHash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramHash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn len(self) -> usize {
        self.digest().output_len()
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// The stored credential for a client-side salted password (what
    /// AlterUserScramCredentials carries): RFC 5802's StoredKey and ServerKey.
    pub fn credential_from_salted(
        self,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let client_key = self.mac(salted_password, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: self.hash(&client_key),
            server_key: self.mac(salted_password, b"Server Key"),
        }
    }

    /// RFC 5802's SaltedPassword: PBKDF2 of the password.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.len()];
        let rounds = std::num::NonZeroU32::new(iterations.max(1)).expect("at least 1");
        pbkdf2::derive(self.pbkdf2(), rounds, salt, password, &mut out);
        out
    }

    /// Whether `password` is the one `credential` was made from (PLAIN's check against
    /// the SCRAM credentials), compared in constant time.
    pub fn password_matches(self, credential: &ScramCredential, password: &[u8]) -> bool {
        let salted = self.salted_password(password, &credential.salt, credential.iterations);
        let derived = self.credential_from_salted(&salted, &credential.salt, credential.iterations);
        constant_time::verify_slices_are_equal(&derived.stored_key, &credential.stored_key).is_ok()
    }
}

/// Why a SCRAM exchange failed: the text goes to the client, so it never says whether
/// the user exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("{0}")]
    Refused(&'static str),
    #[error("invalid credentials")]
    BadProof,
}

/// The first client message, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    pub user: String,
    pub nonce: String,
    /// Its gs2 header (`n,,` or `y,,`, with `a=` if given), which the final message
    /// must repeat as its channel binding.
    pub gs2_header: String,
    pub bare: String,
}

/// RFC 5802 `saslname`: `=2C` is a comma and `=3D` an equals sign; any other `=` is
/// malformed.
fn decode_saslname(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let code = rest.get(i..i + 3).unwrap_or("");
        match code {
            "=2C" => out.push(','),
            "=3D" => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in the user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst, ScramError> {
    let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    let mut parts = text.splitn(3, ',');
    let cbind = parts.next().unwrap_or("");
    let authzid = parts.next().ok_or(ScramError::Malformed("no gs2 header"))?;
    let bare = parts.next().ok_or(ScramError::Malformed("no gs2 header"))?;
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => {
            return Err(ScramError::Refused("channel binding is not supported"));
        }
        _ => return Err(ScramError::Malformed("bad channel binding flag")),
    }
    let authzid = match authzid {
        "" => None,
        a => Some(decode_saslname(
            a.strip_prefix("a=")
                .ok_or(ScramError::Malformed("bad authorization id"))?,
        )?),
    };
    let mut user = None;
    let mut nonce = None;
    for (i, attr) in bare.split(',').enumerate() {
        let (k, v) = attr
            .split_once('=')
            .ok_or(ScramError::Malformed("attribute without a value"))?;
        match (i, k) {
            (0, "m") => {
                return Err(ScramError::Refused(
                    "mandatory extensions are not supported",
                ));
            }
            (0, "n") => user = Some(decode_saslname(v)?),
            (1, "r") => nonce = Some(v.to_string()),
            (0 | 1, _) => return Err(ScramError::Malformed("expected n= then r=")),
            // Kafka's `tokenauth` extension (delegation tokens) is not supported.
            (_, "tokenauth") => {
                return Err(ScramError::Refused("delegation tokens are not supported"));
            }
            _ => {}
        }
    }
    let user = user.ok_or(ScramError::Malformed("no user name"))?;
    let nonce = nonce.ok_or(ScramError::Malformed("no nonce"))?;
    if user.is_empty() || nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ScramError::Malformed("empty user name or bad nonce"));
    }
    if authzid.as_ref().is_some_and(|a| *a != user) {
        return Err(ScramError::Refused(
            "the authorization id must be the user name",
        ));
    }
    Ok(ClientFirst {
        user,
        nonce,
        gs2_header: format!("{cbind},{}", text.split(',').nth(1).unwrap_or("")) + ",",
        bare: bare.to_string(),
    })
}

/// The server's half of one SCRAM exchange, between the client's first and final
/// messages.
#[derive(Debug, Clone)]
pub struct ServerFirst {
    hash: ScramHash,
    client: ClientFirst,
    nonce: String,
    message: String,
    credential: ScramCredential,
}

impl ServerFirst {
    /// Answers `client` with `credential` (a made-up one for an unknown user, so that
    /// the exchange fails at the proof as a wrong password does) and a fresh nonce.
    pub fn new(
        hash: ScramHash,
        client: ClientFirst,
        credential: ScramCredential,
        server_nonce: &[u8],
    ) -> ServerFirst {
        let nonce = format!("{}{}", client.nonce, B64.encode(server_nonce));
        let message = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        ServerFirst {
            hash,
            client,
            nonce,
            message,
            credential,
        }
    }

    pub fn message(&self) -> &[u8] {
        self.message.as_bytes()
    }

    pub fn user(&self) -> &str {
        &self.client.user
    }

    pub fn hash(&self) -> ScramHash {
        self.hash
    }

    /// Checks the client's final message; on success, the server's final message
    /// (`v=`, its signature, so the client knows the server holds the credential).
    pub fn finish(&self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        let binding = B64
            .decode(binding)
            .map_err(|_| ScramError::Malformed("channel binding is not base64"))?;
        if binding != self.client.gs2_header.as_bytes() {
            return Err(ScramError::Refused("the channel binding does not match"));
        }
        if nonce != self.nonce {
            return Err(ScramError::Refused("the nonce does not match"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let auth_message = format!("{},{},{}", self.client.bare, self.message, without_proof);
        let h = self.hash;
        let signature = h.mac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::BadProof);
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        constant_time::verify_slices_are_equal(&h.hash(&client_key), &self.credential.stored_key)
            .map_err(|_| ScramError::BadProof)?;
        let server_signature = h.mac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// The client's half of a SCRAM exchange (RFC 5802), for the agents' own connections
/// to each other's SASL listeners.
#[derive(Debug, Clone)]
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    nonce: String,
    first_bare: String,
    /// The signature the server's final message must carry, once the proof is sent.
    server_signature: Option<Vec<u8>>,
}

/// The gs2 header of a client without channel binding.
const GS2_HEADER: &str = "n,,";

impl ScramClient {
    /// `nonce`: fresh random bytes.
    pub fn new(hash: ScramHash, user: &str, password: &str, nonce: &[u8]) -> ScramClient {
        let name = user.replace('=', "=3D").replace(',', "=2C");
        let nonce = B64.encode(nonce);
        ScramClient {
            hash,
            password: password.to_string(),
            first_bare: format!("n={name},r={nonce}"),
            nonce,
            server_signature: None,
        }
    }

    pub fn first_message(&self) -> Vec<u8> {
        format!("{GS2_HEADER}{}", self.first_bare).into_bytes()
    }

    /// The final message (with the proof) for the server's first message.
    pub fn final_message(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let text =
            std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let mut attrs = text.split(',');
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        let salt = attrs
            .next()
            .and_then(|a| a.strip_prefix("s="))
            .and_then(|s| B64.decode(s).ok())
            .ok_or(ScramError::Malformed("no salt"))?;
        let iterations: u32 = attrs
            .next()
            .and_then(|a| a.strip_prefix("i="))
            .and_then(|i| i.parse().ok())
            .ok_or(ScramError::Malformed("no iteration count"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Refused(
                "the server's nonce does not extend ours",
            ));
        }
        // A server asking for more work than any credential strata stores is refused
        // rather than obeyed.
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Refused("the iteration count is out of range"));
        }
        let h = self.hash;
        let salted = h.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = h.mac(&salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode(GS2_HEADER));
        let auth = format!("{},{text},{without_proof}", self.first_bare);
        let signature = h.mac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = h.mac(&salted, b"Server Key");
        self.server_signature = Some(h.mac(&server_key, auth.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server's final message: it proves the server holds the credential.
    pub fn verify_server(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let expected = self
            .server_signature
            .as_ref()
            .ok_or(ScramError::Refused("no proof was sent yet"))?;
        let given = std::str::from_utf8(server_final)
            .ok()
            .and_then(|t| t.strip_prefix("v="))
            .and_then(|v| B64.decode(v).ok())
            .ok_or(ScramError::Malformed("no server signature"))?;
        constant_time::verify_slices_are_equal(&given, expected)
            .map_err(|_| ScramError::Refused("the server's signature is wrong"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SCRAM client as RFC 5802 describes it, to drive the server in tests.
    fn client_final(
        h: ScramHash,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        gs2: &str,
    ) -> String {
        let attrs: Vec<&str> = server_first.split(',').collect();
        let nonce = attrs[0].strip_prefix("r=").unwrap();
        let salt = B64.decode(attrs[1].strip_prefix("s=").unwrap()).unwrap();
        let iterations: u32 = attrs[2].strip_prefix("i=").unwrap().parse().unwrap();
        let salted = h.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = h.mac(&salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode(gs2));
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = h.mac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    #[test]
    fn an_exchange_with_the_right_password_succeeds_and_a_wrong_one_fails() {
        for h in [ScramHash::Sha256, ScramHash::Sha512] {
            let salted = h.salted_password(b"pencil", b"some salt", 4096);
            let credential = h.credential_from_salted(&salted, b"some salt", 4096);
            let first = parse_client_first(b"n,,n=user,r=clientnonce").unwrap();
            let server = ServerFirst::new(h, first, credential, b"0123456789");
            let server_first = std::str::from_utf8(server.message()).unwrap().to_string();
            assert!(server_first.starts_with("r=clientnonce"), "{server_first}");
            let right = client_final(h, "pencil", "n=user,r=clientnonce", &server_first, "n,,");
            assert!(
                server
                    .finish(right.as_bytes())
                    .expect("right password")
                    .starts_with(b"v=")
            );
            let wrong = client_final(h, "pen", "n=user,r=clientnonce", &server_first, "n,,");
            assert_eq!(server.finish(wrong.as_bytes()), Err(ScramError::BadProof));
            let other_binding =
                client_final(h, "pencil", "n=user,r=clientnonce", &server_first, "y,,");
            assert!(server.finish(other_binding.as_bytes()).is_err());
        }
    }

    #[test]
    fn the_client_and_the_server_agree_and_a_wrong_password_is_refused() {
        for h in [ScramHash::Sha256, ScramHash::Sha512] {
            let salted = h.salted_password(b"s3cret", b"salt", 4096);
            let credential = h.credential_from_salted(&salted, b"salt", 4096);
            for (password, ok) in [("s3cret", true), ("wrong", false)] {
                let mut client = ScramClient::new(h, "agent,1=x", password, b"nonce-bytes");
                let first = parse_client_first(&client.first_message()).expect("first");
                assert_eq!(first.user, "agent,1=x");
                let server = ServerFirst::new(h, first, credential.clone(), b"server");
                let last = client.final_message(server.message()).expect("final");
                match server.finish(&last) {
                    Ok(server_final) => {
                        assert!(ok, "{password} accepted");
                        client.verify_server(&server_final).expect("server proof");
                        assert!(client.verify_server(b"v=AAAA").is_err());
                    }
                    Err(e) => assert!(!ok && e == ScramError::BadProof, "{e}"),
                }
            }
            // A server that does not extend the client's nonce is refused.
            let mut client = ScramClient::new(h, "a", "p", b"n");
            assert!(client.final_message(b"r=other,s=c2FsdA==,i=4096").is_err());
        }
    }

    #[test]
    fn the_rfc_7677_proof_checks_out() {
        // The whole published exchange, byte for byte.
        let h = ScramHash::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = h.salted_password(b"pencil", &salt, 4096);
        let credential = h.credential_from_salted(&salted, &salt, 4096);
        let client = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let mut server = ServerFirst::new(h, client, credential, b"");
        server.nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_string();
        server.message = format!("r={},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", server.nonce);
        let v = server
            .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .expect("the RFC's proof");
        assert_eq!(v, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn plain_checks_passwords_against_scram_credentials() {
        for h in [ScramHash::Sha256, ScramHash::Sha512] {
            let salted = h.salted_password(b"secret", b"salt", 4096);
            let c = h.credential_from_salted(&salted, b"salt", 4096);
            assert!(h.password_matches(&c, b"secret"));
            assert!(!h.password_matches(&c, b"Secret"));
        }
    }

    #[test]
    fn client_first_messages_are_read_strictly() {
        let ok = parse_client_first(b"n,a=al=2Cice,n=al=2Cice,r=abc").unwrap();
        assert_eq!(ok.user, "al,ice");
        assert_eq!(ok.gs2_header, "n,a=al=2Cice,");
        for bad in [
            &b"p=tls-unique,,n=u,r=abc"[..],
            b"x,,n=u,r=abc",
            b"n,,m=ext,n=u,r=abc",
            b"n,,n=u",
            b"n,,r=abc,n=u",
            b"n,,n=a=4,r=abc",
            b"n,a=bob,n=alice,r=abc",
            b"n,,n=u,r=abc,tokenauth=true",
            b"n,,n=,r=abc",
            b"\xff",
            b"",
        ] {
            assert!(
                parse_client_first(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
