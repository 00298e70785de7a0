//! The migration runner on a real database: the schema is made once, a
//! second run changes nothing, and a database whose recorded history is not
//! this build's is refused before anything is applied.

use agentenkit_store::{Error, Store, StoreConfig};
use agentenkit_tests::database_url;

/// A store of a schema of its own, not made yet.
pub(crate) fn fresh_store() -> Store {
    let mut config = StoreConfig::new(database_url());
    config.schema = Some(format!("t_{}", uuid::Uuid::now_v7().simple()));
    config.max_connections = 2;
    Store::connect(&config).expect("store config")
}

/// A connection of its own, outside the store's pool.
pub(crate) async fn raw_client() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

#[tokio::test]
async fn a_schema_is_made_once_and_a_second_run_applies_nothing() {
    let store = fresh_store();
    assert_eq!(
        store.migrate().await.expect("first run"),
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
    );
    assert_eq!(
        store.migrate().await.expect("second run"),
        Vec::<i32>::new()
    );
    store.drop_schema().await.expect("drop");
}

#[tokio::test]
async fn a_database_from_a_pre_release_build_is_refused_untouched() {
    let store = fresh_store();
    let schema = store.schema().expect("a schema").to_owned();
    // What a pre-release build left: its own first migrations, recorded.
    let client = raw_client().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.schema_migrations (
                 version int PRIMARY KEY, name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now());
             INSERT INTO {schema}.schema_migrations (version, name)
                 VALUES (1, 'init'), (2, 'event_notify');"
        ))
        .await
        .expect("stage the old history");
    match store.migrate().await {
        Err(Error::Migration { version, message }) => {
            assert_eq!(version, 1, "{message}");
            assert!(message.contains("pre-release"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .expect("count tables")
        .get(0);
    assert_eq!(tables, 1, "only schema_migrations: nothing was applied");
    store.drop_schema().await.expect("drop");
}

#[tokio::test]
async fn a_failing_migration_says_what_the_server_refused() {
    let store = fresh_store();
    let schema = store.schema().expect("a schema").to_owned();
    let client = raw_client().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.threads (id int)"
        ))
        .await
        .expect("a table in the way");
    match store.migrate().await {
        Err(Error::Migration { version, message }) => {
            assert_eq!(version, 1, "{message}");
            assert!(message.contains("\"threads\" already exists"), "{message}");
        }
        other => panic!("expected the first migration to fail, got {other:?}"),
    }
    store.drop_schema().await.expect("drop");
}
