//! The services of one agent, as the request handlers see them: its identity and
//! settings, the metastore, the cluster membership, the group coordinator, producer ids,
//! the replica manager (partitions and their logs) and the tiering worker.
//!
//! [`Broker`] only holds these and hands them out; the rules live in the services
//! themselves ([`crate::replicas`], [`crate::group`], [`crate::service`]).

use std::sync::Arc;

use strata_metastore::Metastore;
use strata_tiering::{ArchiveReader, TieringWorker};
use tokio_util::sync::CancellationToken;

use crate::authz::Authorizer;
use crate::broker_config::BrokerConfig;
use crate::config::{AckDurability, Settings};
use crate::fetch_sessions::FetchSessions;
use crate::group::Coordinator;
use crate::group::state::GroupConfig;
use crate::membership::Membership;
use crate::open_files::FileBudget;
use crate::producer_ids::ProducerIds;
use crate::replicas::{ReplicaConfig, ReplicaManager};
use crate::service::admin::Admin;
use crate::service::fetch::Fetching;
use crate::service::lifecycle::{Lifecycle, LifecycleConfig};
use crate::service::produce::Producing;
use crate::txn::{Transactions, TxnConfig};

/// How this agent names itself to clients.
#[derive(Debug, Clone)]
pub struct Identity {
    pub node_id: i32,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub cluster_id: String,
}

#[derive(Debug)]
pub struct Broker {
    settings: Settings,
    identity: Identity,
    metastore: Metastore,
    /// The live agents of the cluster, this one among them.
    membership: Arc<Membership>,
    /// The consumer-group coordinator (for the groups hashed to this agent).
    groups: Arc<Coordinator>,
    producer_ids: Arc<ProducerIds>,
    /// The transaction coordinator (for the transactional ids hashed to this agent).
    transactions: Arc<Transactions>,
    replicas: Arc<ReplicaManager>,
    producing: Producing,
    fetching: Fetching,
    /// Kafka connections to the other agents.
    peers: Arc<crate::peers::Peers>,
    /// Incremental fetch sessions (KIP-227).
    fetch_sessions: FetchSessions,
    lifecycle: Arc<Lifecycle>,
    /// The tiering worker, when it runs inside this agent.
    tiering: Option<Arc<TieringWorker>>,
    /// Privileged actions, who asked for them and how they ended.
    audit: crate::audit::Audit,
    /// Who may do what (ACLs), when an authorizer is configured.
    authorizer: Arc<Authorizer>,
    /// Client quotas, and the usage measured against them.
    quotas: Arc<crate::quota::Quotas>,
    /// Failed logins by address, over SASL and HTTP alike.
    login_failures: Arc<crate::sasl::LoginFailures>,
    shutdown: CancellationToken,
}

/// What [`Broker::new`] is built from.
pub struct Parts {
    pub settings: Settings,
    pub metastore: Metastore,
    pub membership: Arc<Membership>,
    pub logs_dir: std::path::PathBuf,
    pub archive: Arc<ArchiveReader>,
    pub files: FileBudget,
    pub shutdown: CancellationToken,
}

impl Broker {
    /// Builds the services and serves the topics the metastore has now.
    pub async fn new(parts: Parts) -> anyhow::Result<Arc<Broker>> {
        let Parts {
            settings,
            metastore,
            membership,
            logs_dir,
            archive,
            files,
            shutdown,
        } = parts;
        // Tiering's encoding, compaction and merging run here, never on a request thread.
        let background = strata_core::background::Background::start(
            settings.background(),
            Arc::clone(membership.clock()),
        );
        let tiering = settings.tiering_enabled.then(|| {
            Arc::new(TieringWorker::new(
                Arc::clone(&archive),
                metastore.clone(),
                Arc::clone(&background),
            ))
        });
        let (advertised_host, advertised_port) = settings.advertised()?;
        let settings_data_dir = settings.data_dir.clone();
        let cluster_id = metastore.cluster().await?.cluster_id;
        let node_id = settings.node_id;
        let groups = Arc::new(Coordinator::new(
            GroupConfig {
                initial_rebalance_delay_ms: settings.group_initial_rebalance_delay_ms,
                min_session_timeout_ms: settings.group_min_session_timeout_ms,
                max_session_timeout_ms: settings.group_max_session_timeout_ms,
            },
            settings.offsets_retention_minutes * 60_000,
            metastore.clone(),
            {
                let membership = Arc::clone(&membership);
                Box::new(move |group| membership.coordinates(node_id, group))
            },
            Arc::clone(membership.clock()),
        ));
        let replicas = ReplicaManager::start(
            ReplicaConfig {
                node_id,
                broker_config: Arc::new(BrokerConfig::new(
                    &settings,
                    (&advertised_host, advertised_port),
                )),
                ack_after_fsync: settings.ack_durability == AckDurability::Fsync,
                max_request_bytes: settings.max_request_bytes,
                producer_id_expiration_ms: settings.producer_id_expiration_ms,
                rebuild_max_bytes_per_second: settings.replica_rebuild_max_bytes_per_second,
            },
            metastore.clone(),
            Arc::clone(&membership),
            archive,
            files,
            logs_dir,
            shutdown.clone(),
        )
        .await?;
        let lifecycle = Arc::new(Lifecycle::new(
            Arc::clone(&replicas),
            LifecycleConfig {
                check_interval_ms: settings.log_retention_check_interval_ms,
                cleaner_backoff_ms: settings.log_cleaner_backoff_ms,
                archive_grace_ms: settings.archive_gc_grace_ms,
                key_map_bytes: settings.log_cleaner_dedupe_buffer_size,
                merge_target_bytes: settings.archive_merge_target_bytes,
                archive_work: settings.compactor_enabled,
            },
            background,
        ));
        let producer_ids = Arc::new(ProducerIds::new(metastore.clone()));
        let peers = Arc::new(crate::peers::Peers::new(
            node_id,
            settings.max_request_bytes,
        ));
        // The ACLs are read before the first request is served: none is decided on an
        // empty set that would deny (or allow) what the bindings say otherwise.
        let authorizer = Arc::new(Authorizer::new(settings.authz()?, metastore.clone()));
        authorizer.refresh().await?;
        let authz = settings.authz()?;
        if authz.enabled && authz.super_users.is_empty() && !authz.allow_if_no_acl {
            tracing::warn!(
                "an authorizer with no super_users: only principals the stored ACLs name may do anything; \
                 if there are none yet, name an admin in super_users to create them"
            );
        }
        let quotas = Arc::new(crate::quota::Quotas::new(
            crate::quota::Windows {
                samples: settings.quota_window_num,
                window_ms: settings.quota_window_size_seconds * 1000,
            },
            metastore.clone(),
        ));
        quotas.refresh().await?;
        let transactions = Arc::new(Transactions::new(
            metastore.clone(),
            Arc::clone(&membership),
            Arc::clone(&replicas),
            Arc::clone(&producer_ids),
            TxnConfig {
                max_timeout_ms: settings.transaction_max_timeout_ms,
                abort_check_interval_ms: settings
                    .transaction_abort_timed_out_transaction_cleanup_interval_ms,
                id_expiration_ms: settings.transactional_id_expiration_ms,
            },
        ));
        let fetch_sessions = FetchSessions::new(settings.max_incremental_fetch_session_cache_slots);
        let login_failures = Arc::new(crate::sasl::LoginFailures::new(
            std::time::Duration::from_millis(settings.connection_failed_authentication_delay_ms),
        ));
        Ok(Arc::new(Broker {
            producer_ids,
            transactions,
            identity: Identity {
                node_id,
                advertised_host,
                advertised_port,
                cluster_id,
            },
            settings,
            metastore,
            membership,
            groups,
            producing: Producing::new(
                Arc::clone(&replicas),
                Arc::clone(&authorizer),
                Arc::clone(&peers),
            ),
            fetching: Fetching::new(
                Arc::clone(&replicas),
                Arc::clone(&authorizer),
                Arc::clone(&peers),
            ),
            peers,
            fetch_sessions,
            lifecycle,
            replicas,
            tiering,
            audit: crate::audit::Audit::at(&settings_data_dir.join("audit.log")),
            authorizer,
            quotas,
            login_failures,
            shutdown,
        }))
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn node_id(&self) -> i32 {
        self.identity.node_id
    }

    /// Failed logins by client address, for the delay before a failure's answer.
    pub fn login_failures(&self) -> &Arc<crate::sasl::LoginFailures> {
        &self.login_failures
    }

    pub fn metastore(&self) -> &Metastore {
        &self.metastore
    }

    pub fn membership(&self) -> &Arc<Membership> {
        &self.membership
    }

    /// Consumer groups ([`crate::service::groups`]), which decides who may.
    pub fn groups(&self) -> crate::service::groups::Groups<'_> {
        crate::service::groups::Groups {
            coordinator: &self.groups,
            replicas: &self.replicas,
            peers: &self.peers,
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    pub fn producer_ids(&self) -> &ProducerIds {
        &self.producer_ids
    }

    /// The transaction coordinator ([`crate::txn`]).
    pub fn transactions(&self) -> &Arc<Transactions> {
        &self.transactions
    }

    pub fn replicas(&self) -> &Arc<ReplicaManager> {
        &self.replicas
    }

    /// Appending as leader ([`crate::service::produce`]).
    pub fn producing(&self) -> &Producing {
        &self.producing
    }

    /// Kafka connections to the other agents ([`crate::peers`]).
    pub fn peers(&self) -> &crate::peers::Peers {
        &self.peers
    }

    /// Reading as leader, for consumers and followers ([`crate::service::fetch`]).
    pub fn fetching(&self) -> &Fetching {
        &self.fetching
    }

    /// Incremental fetch sessions ([`crate::fetch_sessions`]).
    pub fn fetch_sessions(&self) -> &FetchSessions {
        &self.fetch_sessions
    }

    /// Creating, deleting and growing topics ([`crate::service::admin`]).
    pub fn admin(&self) -> Admin<'_> {
        Admin {
            replicas: &self.replicas,
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// DeleteRecords for a caller ([`crate::service::lifecycle::Records`]).
    pub fn records(&self) -> crate::service::lifecycle::Records<'_> {
        crate::service::lifecycle::Records {
            lifecycle: &self.lifecycle,
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// The transaction APIs for a caller ([`crate::service::transactions`]).
    pub fn transacting(&self) -> crate::service::transactions::Transacting<'_> {
        crate::service::transactions::Transacting {
            coordinator: &self.transactions,
            groups: &self.groups,
            producer_ids: &self.producer_ids,
            replicas: &self.replicas,
            membership: &self.membership,
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// This agent's own state: ready, tiering progress, its replicas.
    pub fn status(&self) -> crate::service::status::Status<'_> {
        crate::service::status::Status {
            replicas: &self.replicas,
            metastore: &self.metastore,
            tiering: self.tiering.as_ref(),
            node_id: self.node_id(),
        }
    }

    /// The cluster's agents as an operator sees them: list, health, drain.
    pub fn agents(&self) -> crate::service::agents::Agents<'_> {
        crate::service::agents::Agents {
            replicas: &self.replicas,
            healing: self.settings().healing(),
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// An operator's repairs of a partition's archive (tier now, verify).
    pub fn maintenance(&self) -> crate::service::maintenance::Maintenance<'_> {
        crate::service::maintenance::Maintenance {
            replicas: &self.replicas,
            tiering: self.tiering.as_ref(),
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// Looking up offsets: ListOffsets and OffsetForLeaderEpoch
    /// ([`crate::service::offsets`]).
    pub fn offsets(&self) -> crate::service::offsets::Offsets<'_> {
        crate::service::offsets::Offsets {
            replicas: &self.replicas,
            authorizer: &self.authorizer,
            peers: &self.peers,
        }
    }

    /// Reassigning replicas and electing leaders ([`crate::service::placement`]).
    pub fn placement(&self) -> crate::service::placement::Placement<'_> {
        crate::service::placement::Placement {
            replicas: &self.replicas,
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// Topic, broker and logger configs ([`crate::service::configs`]).
    pub fn configs(&self) -> crate::service::configs::Configs<'_> {
        crate::service::configs::Configs {
            replicas: &self.replicas,
            authorizer: &self.authorizer,
            audit: &self.audit,
        }
    }

    /// Retention, DeleteRecords and archive collection
    /// ([`crate::service::lifecycle`]).
    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }

    pub fn tiering(&self) -> Option<&Arc<TieringWorker>> {
        self.tiering.as_ref()
    }

    /// Cancelled when the agent begins to stop.
    /// The services an offset reset is built on.
    pub fn offsets_reset(&self) -> crate::service::reset::Reset<'_> {
        crate::service::reset::Reset {
            groups: self.groups(),
            admin: self.admin(),
            offsets: self.offsets(),
            audit: &self.audit,
        }
    }

    pub fn audit(&self) -> &crate::audit::Audit {
        &self.audit
    }

    pub fn quotas(&self) -> &Arc<crate::quota::Quotas> {
        &self.quotas
    }

    pub fn authorizer(&self) -> &Arc<Authorizer> {
        &self.authorizer
    }

    /// The security service: ACLs, SCRAM users and quotas.
    pub fn security(&self) -> crate::service::security::Security<'_> {
        crate::service::security::Security {
            authorizer: &self.authorizer,
            metastore: &self.metastore,
            quotas: &self.quotas,
            audit: &self.audit,
        }
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}
