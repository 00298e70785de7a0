//! `Client::pipeline` (vendor/tokio-postgres, patched in): statements sent
//! with one `Sync` are one implicit transaction, answered statement by
//! statement; the first failure rolls every one back and skips the rest,
//! and the connection serves the next pipeline. The store's commits rely on
//! each of these (crates/store/src/pipeline.rs).

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, PipelineResult, Statement, TransactionStatus};

use crate::migrations::raw_client;

/// A table of this test's own, in a schema of its own (`t_`, so that
/// `make clean-test-schemas` drops it if the test dies before [`drop_table`]).
async fn table(client: &Client) -> String {
    let schema = format!("t_pipeline_{}", uuid::Uuid::now_v7().simple());
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (id int PRIMARY KEY)"
        ))
        .await
        .expect("table");
    format!("{schema}.t")
}

/// Drops the schema of [`table`]'s `t`.
async fn drop_table(client: &Client, t: &str) {
    let schema = t.split('.').next().expect("schema.table");
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the test's schema");
}

async fn prepare(client: &Client, sql: &str) -> Statement {
    client.prepare(sql).await.expect("prepare")
}

fn rows_of(result: &PipelineResult) -> (Vec<i64>, u64) {
    match result {
        PipelineResult::Ran { rows, affected } => {
            (rows.iter().map(|r| r.get::<_, i64>(0)).collect(), *affected)
        }
        other => panic!("expected the statement to run, got {other:?}"),
    }
}

#[tokio::test]
async fn a_pipeline_is_one_transaction_answered_statement_by_statement() {
    let client = raw_client().await;
    let t = table(&client).await;
    let insert = prepare(&client, &format!("INSERT INTO {t} VALUES ($1)")).await;
    let xid = prepare(&client, "SELECT pg_current_xact_id()::text::bigint").await;
    let count = prepare(&client, &format!("SELECT count(*) FROM {t}")).await;
    let local = prepare(
        &client,
        "SELECT set_config('synchronous_commit', 'off', true)",
    )
    .await;
    let (one, two): (i32, i32) = (1, 2);
    let none: &[&(dyn ToSql + Sync)] = &[];
    let (results, status) = client
        .pipeline(&[
            (&xid, none),
            (&local, none),
            (&insert, &[&one]),
            (&insert, &[&two]),
            (&count, none),
            (&xid, none),
        ])
        .await
        .expect("pipeline");
    assert_eq!(results.len(), 6);
    assert_eq!(status, TransactionStatus::Idle, "ended at the Sync");
    let (first_xid, _) = rows_of(&results[0]);
    assert_eq!(rows_of(&results[2]), (vec![], 1), "an insert's row count");
    assert_eq!(
        rows_of(&results[4]),
        (vec![2], 1),
        "each statement sees the ones before it"
    );
    assert_eq!(rows_of(&results[5]).0, first_xid, "one transaction");
    // Committed at the Sync, and what was set for the transaction ended with it.
    let after = client
        .query_one(
            &format!("SELECT count(*), current_setting('synchronous_commit') FROM {t}"),
            &[],
        )
        .await
        .expect("read back");
    assert_eq!(after.get::<_, i64>(0), 2);
    assert_eq!(after.get::<_, String>(1), "on");
    drop_table(&client, &t).await;
}

#[tokio::test]
async fn the_first_failure_rolls_the_pipeline_back_and_skips_the_rest() {
    let client = raw_client().await;
    let t = table(&client).await;
    let insert = prepare(&client, &format!("INSERT INTO {t} VALUES ($1)")).await;
    let (one, two, three): (i32, i32, i32) = (1, 2, 3);
    let (results, status) = client
        .pipeline(&[
            (&insert, &[&one]),
            (&insert, &[&one]),
            (&insert, &[&two]),
            (&insert, &[&three]),
        ])
        .await
        .expect("pipeline");
    assert!(matches!(
        results[0],
        PipelineResult::Ran { affected: 1, .. }
    ));
    match &results[1] {
        PipelineResult::Failed(e) => assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
        ),
        other => panic!("expected the duplicate to fail, got {other:?}"),
    }
    assert!(matches!(results[2], PipelineResult::Skipped));
    assert!(matches!(results[3], PipelineResult::Skipped));
    assert_eq!(status, TransactionStatus::Idle, "rolled back at the Sync");
    let count = prepare(&client, &format!("SELECT count(*) FROM {t}")).await;
    // The connection is out of the failed transaction: the next pipeline
    // runs, and sees that nothing of the first one was committed.
    let (again, _) = client
        .pipeline(&[(&insert, &[&three]), (&count, &[])])
        .await
        .expect("the next pipeline");
    assert_eq!(rows_of(&again[1]), (vec![1], 1));
    drop_table(&client, &t).await;
}

#[tokio::test]
async fn an_explicit_transaction_stays_open_across_pipelines() {
    let client = raw_client().await;
    let t = table(&client).await;
    let begin = prepare(&client, "BEGIN").await;
    let commit = prepare(&client, "COMMIT").await;
    let insert = prepare(&client, &format!("INSERT INTO {t} VALUES ($1)")).await;
    let one: i32 = 1;
    let (_, status) = client
        .pipeline(&[(&begin, &[]), (&insert, &[&one])])
        .await
        .expect("begin");
    assert_eq!(status, TransactionStatus::InTransaction);
    let other = raw_client().await;
    let count = format!("SELECT count(*) FROM {t}");
    let before: i64 = other.query_one(&count, &[]).await.expect("count").get(0);
    assert_eq!(before, 0, "not committed at the first Sync");
    let (_, status) = client.pipeline(&[(&commit, &[])]).await.expect("commit");
    assert_eq!(status, TransactionStatus::Idle);
    let after: i64 = other.query_one(&count, &[]).await.expect("count").get(0);
    assert_eq!(after, 1);
    drop_table(&client, &t).await;
}

#[tokio::test]
async fn a_failed_explicit_transaction_is_reported_until_it_ends() {
    let client = raw_client().await;
    let t = table(&client).await;
    let begin = prepare(&client, "BEGIN").await;
    let rollback = prepare(&client, "ROLLBACK").await;
    let insert = prepare(&client, &format!("INSERT INTO {t} VALUES ($1)")).await;
    let one: i32 = 1;
    let (results, status) = client
        .pipeline(&[(&begin, &[]), (&insert, &[&one]), (&insert, &[&one])])
        .await
        .expect("pipeline");
    assert!(matches!(results[2], PipelineResult::Failed(_)));
    assert_eq!(
        status,
        TransactionStatus::Failed,
        "only its end is accepted"
    );
    let (_, status) = client
        .pipeline(&[(&rollback, &[])])
        .await
        .expect("rollback");
    assert_eq!(status, TransactionStatus::Idle);
    drop_table(&client, &t).await;
}
