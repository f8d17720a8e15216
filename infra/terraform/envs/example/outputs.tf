output "bootstrap_servers" {
  description = "Kafka bootstrap.servers for clients."
  value       = module.network.bootstrap_servers
}

output "bucket_name" {
  description = "Archive bucket (query it with any Parquet engine, e.g. DuckDB's read_parquet with hive_partitioning)."
  value       = module.object_store.bucket_name
}

output "archive_url" {
  description = "Where the agents archive closed segments."
  value       = module.object_store.archive_url
}

output "fdb_cluster_file_parameter_name" {
  description = "SSM parameter holding the FoundationDB cluster file."
  value       = module.metastore.cluster_file_parameter_name
}

output "fdb_coordinators" {
  description = "FoundationDB coordinator addresses."
  value       = module.metastore.coordinators
}

output "agents_autoscaling_group_name" {
  description = "Autoscaling group of the agents."
  value       = module.agents.autoscaling_group_name
}
