//! Who asks a service for something: the principal a listener authenticated, the
//! client's address and the edge the request came through. Each edge makes one per
//! request (the Kafka edge from its connection, the HTTP edge from the request's
//! extensions); a service authorizes it ([`Caller::authz`]) and names it in the audit
//! log.

use std::net::{IpAddr, SocketAddr};

use crate::context::Principal;

#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub address: Option<SocketAddr>,
    /// The interface the request came through: `http` or `kafka`.
    pub via: &'static str,
}

impl Caller {
    pub fn anonymous(address: Option<SocketAddr>, via: &'static str) -> Caller {
        Caller {
            principal: Principal::anonymous(),
            address,
            via,
        }
    }

    /// The caller as the authorizer checks it: principal and host.
    pub fn authz(&self) -> crate::authz::Caller<'_> {
        crate::authz::Caller {
            principal: &self.principal,
            host: self.address.map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip()),
        }
    }
}
